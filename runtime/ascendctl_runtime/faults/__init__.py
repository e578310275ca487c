"""Hardware fault signals (issue 24): parsers of the driver tools' output into typed
readings, observations derived from them, the policy table mapping each fault code or
signal to an action, and the evaluator that turns readings over time into actions.

Standard library only: the agent on each node runs it. The parsers, signals, policy and
evaluator are pure (the caller passes text and times in); gather.py, logtail.py,
progress.py and monitor.py are the node side that runs the tools, reads the logs and the
engine's metrics, and keeps the state under the deploy root.
"""
