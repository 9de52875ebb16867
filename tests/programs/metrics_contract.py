#!/usr/bin/env python3
"""The metrics contract of the training programs of Assignments 2 and 3: each problem's command
(the handout's, at the tiny preset), run here, writes per rank exactly the fields that
tests/programs/metrics_fields.json records, each of the recorded JSON kind (object, list,
integer, number, string, bool, null; a list by its first item). A field added, dropped or
changed in kind fails with the difference, whichever program writes it: a program that takes
over another's commands (one training program for every problem) must keep them.

    python3 tests/programs/metrics_contract.py BUILD             # check
    python3 tests/programs/metrics_contract.py BUILD --record    # write the fields as they are now

--record is for a deliberate change of the contract; starter/bin/README.md documents the
fields, and the commit says why they changed.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTRACT = HERE / "metrics_fields.json"
# Tiny sizes that every command below fits: 4 heads for t = 2, 2 blocks for p = 2.
TINY = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "16", "--vocab-size", "64", "--steps", "2",
        "--warmup", "1", "--threads", "1", "--no-progress"]


def kind(v):
    """The JSON kind of a value, objects and lists spelled out."""
    if isinstance(v, dict):
        return {k: kind(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return ["list", kind(v[0])] if v else ["list"]
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if v is None:
        return "null"
    return "string"


def differences(want, got, where="") -> list:
    """Each place where the recorded kind `want` and the measured `got` part."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: recorded, not written" for k in sorted(set(want) - set(got))]
        out += [f"{where}.{k}: written ({json.dumps(got[k])}), not recorded" for k in sorted(set(got) - set(want))]
        for k in sorted(set(want) & set(got)):
            out += differences(want[k], got[k], f"{where}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == 2 and len(got) == 2:
        return differences(want[1], got[1], where + "[0]")
    return [] if want == got else [f"{where}: recorded {json.dumps(want)}, written {json.dumps(got)}"]


def run(build: Path, case: dict, scratch: Path) -> dict:
    """{rank file name: kind} of one command's metrics."""
    out = scratch / case["name"]
    out.mkdir()
    cmd = [str(build / case["program"])] + case["args"] + TINY + ["--out", str(out / "rank{rank}.json")]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    if p.returncode != 0:
        raise RuntimeError(f"{case['name']}: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    files = sorted(out.glob("rank*.json"))
    if not files:
        raise RuntimeError(f"{case['name']}: {' '.join(cmd)} wrote no metrics in {out}")
    return {f.name: kind(json.loads(f.read_text())) for f in files}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=Path)
    ap.add_argument("--record", action="store_true", help="write the fields as the programs write them now")
    args = ap.parse_args(argv)
    contract = json.loads(CONTRACT.read_text())
    problems = []
    with tempfile.TemporaryDirectory(prefix="metrics-contract-") as tmp:
        for case in contract["cases"]:
            try:
                got = run(args.build, case, Path(tmp))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                problems.append(str(e))
                continue
            if args.record:
                case["fields"] = got
                continue
            for rank in sorted(set(case["fields"]) | set(got)):
                if rank not in got or rank not in case["fields"]:
                    problems.append(f"{case['name']}: {rank} {'not written' if rank not in got else 'not recorded'}")
                    continue
                problems += [f"{case['name']} {rank}{d}" for d in differences(case["fields"][rank], got[rank])]
            print(f"{case['name']}: {len(got)} rank files checked", flush=True)
    if args.record and not problems:
        CONTRACT.write_text(json.dumps(contract, indent=1) + "\n")
        print(f"recorded {CONTRACT}")
    print("\n".join([f"PROBLEM {p}" for p in problems] + [f"{len(problems)} problems" if problems else "METRICS_CONTRACT_OK"]))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
