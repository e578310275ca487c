"""The inventory `lab up` writes (Ansible-style YAML), which later commands take with -i."""

from __future__ import annotations

from pathlib import Path


def build(*, name: str, chip: str, npus: int, roce_mtu: int, netmask: str, key: Path,
          known_hosts: Path, nodes: list[dict]) -> dict:
    return {
        "all": {
            "vars": {
                "cluster": {"name": name, "chip": chip, "npus_per_node": npus,
                            "roce": {"netmask": netmask, "mtu": roce_mtu}},
                "ssh": {"user": "root", "port": 22, "private_key": str(key),
                        "known_hosts": str(known_hosts), "host_key_checking": "strict"},
            },
            "children": {
                "nodes": {
                    "hosts": {
                        n["name"]: {"ansible_host": n["mgmt_ip"], "rank": n["rank"],
                                    "ip": n["mgmt_ip"], "nic": n["nic"],
                                    "device_ips": list(n["device_ips"])}
                        for n in nodes
                    }
                }
            },
        }
    }


def write(path: Path, data: dict) -> None:
    import yaml

    header = ("# Written by `ascendctl lab up` for the simulated cluster; "
              "use it with `-i`.\n")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None,
                                           width=100))
    tmp.replace(path)
