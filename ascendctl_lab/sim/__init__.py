"""The simulated Ascend stack that runs inside every lab node (stdlib only).

The same modules run on the controller (unit tests render output from a state dict)
and inside the nodes, where they are installed as the package `ascend_sim` behind the
real tool paths (/usr/local/sbin/npu-smi, /usr/local/Ascend/driver/tools/hccn_tool,
/usr/bin/lspci). Only relative imports, so either package name works.
"""
