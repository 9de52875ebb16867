"""ctest setup.slurm_scripts: the batch scripts of scripts/slurm/ run as written in a fresh copy,
under a fake `srun` on this CPU machine. The fake starts SLURM_NTASKS tasks with the variables
a real step gives each (SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_ID, ...) and binds one GPU per
task the way `--gpus-per-task=1` does: each task's CUDA_VISIBLE_DEVICES holds its own index.
The scripts' GPU settings are swapped for CPU ones through their own variables (KIT_BACKEND=gloo,
KIT_DEVICE=cpu); everything else (the srun line, the world size, the batch, the output paths)
is the script's.

    python3 tests/setup/test_slurm_scripts.py <build dir>
"""
import json
import os
import random
import re
import socket
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
SLURM = KIT / "scripts" / "slurm"
BUILD = Path(os.environ.get("KIT_TEST_BUILD", "build")).resolve()
SMALL = ["--preset", "tiny", "--epochs", "2", "--n-train", "32", "--n-valid", "8", "--n-test", "8",
         "--max-batches", "2", "--no-progress"]

# srun as a step gives it: one process per task, each with its own rank variables and, with
# per-task GPU binding, one visible GPU of its own. Any task failing fails the step.
FAKE_SRUN = r'''#!/usr/bin/env python3
import os, subprocess, sys
n = int(os.environ["SLURM_NTASKS"])
procs = []
for i in range(n):
    env = dict(os.environ, SLURM_PROCID=str(i), SLURM_LOCALID=str(i), SLURM_NODEID="0",
               SLURM_STEP_ID="0", SLURM_STEP_NUM_NODES="1", SLURM_STEP_NODELIST="localhost",
               CUDA_VISIBLE_DEVICES=str(i))
    procs.append(subprocess.Popen(sys.argv[1:], env=env))
codes = []
for p in procs:
    try:
        codes.append(p.wait(timeout=240))
    except subprocess.TimeoutExpired:
        for q in procs: q.kill()
        sys.exit("fake srun: a task ran past 240 s")
sys.exit(max(codes, key=abs))
'''


def free_port() -> int:
    """A free port, from 20000..39999 when one is free there, so that the job id can name it
    and the ranks take the port the kit derives from SLURM_JOB_ID (no MASTER_PORT at all)."""
    for port in random.Random().sample(range(20000, 40000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sbatch_lines(script: Path) -> dict:
    """The script's #SBATCH options: {name: value}."""
    out = {}
    for line in script.read_text().splitlines():
        m = re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


class SlurmScripts(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.submit = Path(self.tmp.name) / "submit"   # the directory sbatch is called from
        self.submit.mkdir()
        bin_dir = Path(self.tmp.name) / "bin"
        bin_dir.mkdir()
        srun = bin_dir / "srun"
        srun.write_text(FAKE_SRUN)
        srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
        self.path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"

    def tearDown(self):
        self.tmp.cleanup()

    def sbatch(self, script: str, ntasks: int, env: dict, args):
        """Run the script as sbatch does: in the allocation's environment, from the submit
        directory; the job id picks the rendezvous port (20000 + id % 20000)."""
        port = free_port()
        job_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE",
                                                                              "LOCAL_RANK", "MASTER_"))}
        derived = 20000 <= port < 40000   # the kit's own rule can reach this port
        job_env.update(PATH=self.path, SLURM_NTASKS=str(ntasks), SLURM_NNODES="1", SLURM_NODELIST="localhost",
                       SLURM_JOB_ID=str(port - 20000 if derived else 4242),
                       SLURM_SUBMIT_DIR=str(self.submit), SLURM_CPUS_PER_TASK="1", KIT_BUILD=str(BUILD),
                       KIT_DIST_TIMEOUT="60", OMP_NUM_THREADS="1", **env)
        if not derived:
            job_env["MASTER_PORT"] = str(port)
        return subprocess.run(["bash", str(SLURM / script)] + list(args), env=job_env, cwd="/",
                              capture_output=True, text=True, timeout=300)

    def test_logs_go_where_slurm_can_open_them_in_a_fresh_copy(self):
        # Slurm opens --output before the script runs: a directory in it must already exist,
        # and a fresh copy of the kit has no runs/.
        for script in sorted(SLURM.glob("*.sbatch")):
            opts = sbatch_lines(script)
            self.assertIn("output", opts, script.name)
            self.assertNotIn("/", opts["output"], f"{script.name}: --output={opts['output']} needs a directory")
            # The partition and account are the user's (sbatch -p/-A, SBATCH_PARTITION/ACCOUNT).
            self.assertNotIn("partition", opts, script.name)
            self.assertNotIn("account", opts, script.name)

    def data_parallel(self, ntasks):
        r = self.sbatch("data_parallel.sbatch", ntasks, {"KIT_BACKEND": "gloo", "KIT_BATCH_PER_RANK": "4"}, SMALL)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        out = self.submit / "runs" / "data_parallel" / f"world{ntasks}"   # where plot_figures reads
        files = sorted(out.glob("rank*.json"))
        self.assertTrue(files, f"no metrics in {out}: {r.stdout[-2000:]}")
        metrics = [json.loads(f.read_text()) for f in files]
        self.assertEqual(len(files), ntasks, files)
        for m in metrics:
            self.assertEqual((m["run"]["world_size"], m["run"]["batch_size"]), (ntasks, 4 * ntasks), m["run"])

    def test_data_parallel_world_2_one_rank_per_task_each_bound_to_its_own_gpu(self):
        self.data_parallel(2)

    def test_data_parallel_world_1_the_baseline(self):
        self.data_parallel(1)

    def test_pipeline_both_modes(self):
        r = self.sbatch("pipeline.sbatch", 1, {"KIT_DEVICE": "cpu"}, SMALL + ["--batch-size", "4", "--chunks", "2"])
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        for mode in ("model_parallel", "pipeline_parallel"):
            self.assertTrue((self.submit / "runs" / "pipeline" / f"{mode}.json").is_file(), mode)

    def test_a_script_outside_a_job_says_so(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        r = subprocess.run(["bash", str(SLURM / "data_parallel.sbatch")], env=dict(env, KIT_BUILD=str(BUILD)),
                           cwd=self.submit, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("run this with sbatch", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        BUILD = Path(sys.argv.pop(1)).resolve()
    unittest.main()
