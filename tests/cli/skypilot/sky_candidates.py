"""Prints SkyPilot's own reading of task files as JSON, for tern's comparison test.

For each task path given: its candidate resources (after SkyPilot expands accelerator sets and
lists, `any_of` and `ordered`), its node count, run and setup text, its envs and secrets, and its disk size.
Runs offline: the caller points HOME at a folder whose ~/.sky/catalogs holds the catalogs.
"""
import json
import sys

import sky


def amount(v):
    if v is None:
        return None
    s = str(v)
    plus = s.endswith('+')
    return {'value': float(s.rstrip('+')), 'at_least': plus}


def candidate(r):
    (name, count), = r.accelerators.items() if r.accelerators else [(None, None)]
    return {
        'cloud': str(r.cloud).lower() if r.cloud is not None else None,
        'region': r.region,
        'zone': r.zone,
        'accelerator': name,
        'count': int(count) if count is not None else None,
        'use_spot': bool(r.use_spot),
        'instance_type': r.instance_type,
        'cpus': amount(r.cpus),
        'memory': amount(r.memory),
    }


def secret(v):
    return v.get_secret_value() if hasattr(v, 'get_secret_value') else v


out = {}
for path in sys.argv[1:]:
    t = sky.Task.from_yaml(path)
    out[path] = {
        'candidates': [candidate(r) for r in t.resources],
        'num_nodes': t.num_nodes,
        'run': t.run,
        'setup': t.setup,
        'envs': dict(t.envs),
        'secrets': {k: secret(v) for k, v in (t.secrets or {}).items()},
        # The largest disk any candidate asks for; None where none says.
        'disk_size': max((r.disk_size for r in t.resources if r.disk_size_specified),
                         default=None),
    }
print(json.dumps(out))
