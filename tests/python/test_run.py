"""`python -m gardenalloc run` against the recording stand-in for torch
(standin/torch): the allocator is installed in the program as soon as it
imports torch, in the processes it starts too; arguments, exit status and
signals are the program's own; the user's sys.path and sitecustomize are
left as they were. Each case runs real processes."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(REPO, "python_shim")
STANDIN = os.path.join(HERE, "standin")

# What a program prints about the allocator in its process: the stand-in's
# record, and whether each hook got the address of the function it names.
REPORT = textwrap.dedent(r"""
    import json


    def report(tag=""):
        import ctypes, json, os, sys, torch, gardenalloc
        lib = gardenalloc.library()
        changes = [c for c in torch.calls if c[0] == "change"]
        out = {"tag": tag, "pid": os.getpid(), "changes": len(changes), "argv": sys.argv[1:],
               "boot_on_path": any("_boot" in p for p in sys.path), "conf": os.environ.get("GARDENALLOC_CONF")}
        if changes:
            from torch_standin import HOOKS as want
            a = changes[0][1]
            out["args"] = list(a.args)
            out["lib"] = lib.path
            out["hooks_match"] = a.inner.hooks == {k: ctypes.cast(getattr(lib, v), ctypes.c_void_p).value
                                                   for k, v in want.items()}
        return out
""")


def env_for(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GARDENALLOC_RUN")}
    env["PYTHONPATH"] = STANDIN  # the user's own PYTHONPATH: here, where the stand-in torch lives
    env.setdefault("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:4096")
    env.update(extra)
    return env


def gardenalloc_run(args, program=None, env=None, **kw):
    """python -m gardenalloc run ARGS, with the package from the source tree
    (the runner's own interpreter finds it through -c, not PYTHONPATH)."""
    boot = "import sys; sys.path.insert(0, %r); from gardenalloc.__main__ import main; sys.exit(main())" % SHIM
    cmd = [sys.executable, "-c", boot, "run"] + args
    return subprocess.run(cmd, capture_output=True, text=True, env=env or env_for(), timeout=120, **kw)


class Run(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def program(self, body, name="prog.py"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(REPORT + textwrap.dedent(body))
        return path

    def last_json(self, r):
        self.assertEqual(r.returncode, 0, r.stderr)
        return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]

    def test_installed_when_torch_is_imported_with_arguments_passed(self):
        prog = self.program("""
            import torch                      # the program's first use of torch
            print(json.dumps(report()))
        """)
        r = gardenalloc_run(["--", sys.executable, prog, "a b", "--conf", "-x"])
        out = self.last_json(r)[0]
        self.assertEqual(out["changes"], 1, "change_current_allocator once, right at import")
        self.assertEqual(out["args"], [out["lib"], "ga_torch_alloc", "ga_torch_free"])
        self.assertTrue(out["hooks_match"], "every hook set to the address of its function")
        self.assertEqual(out["argv"], ["a b", "--conf", "-x"])
        self.assertFalse(out["boot_on_path"], "the hook's folder is not on the program's sys.path")

    def test_without_the_double_dash(self):
        prog = self.program("import torch; print(json.dumps(report()))")
        out = self.last_json(gardenalloc_run([sys.executable, prog, "--x"]))[0]
        self.assertEqual((out["changes"], out["argv"]), (1, ["--x"]))

    def test_conf_reaches_the_program(self):
        prog = self.program("""
            import torch, gardenalloc
            print(json.dumps(dict(report(), configuration=gardenalloc.configuration())))
        """)
        conf = "backend:sim,sim_capacity_mb:2048,expandable_segments:True"
        out = self.last_json(gardenalloc_run(["--conf", conf, "--", sys.executable, prog]))[0]
        self.assertEqual(out["conf"], conf)
        self.assertEqual(out["configuration"], [conf, "GARDENALLOC_CONF"])

    def test_a_bad_conf_is_refused_before_the_program_starts(self):
        marker = os.path.join(self.dir, "ran")
        prog = self.program("open(%r, 'w').close()" % marker)
        r = gardenalloc_run(["--conf", "expandable_segments:yes", "--", sys.executable, prog])
        self.assertEqual(r.returncode, 2)
        self.assertIn("expandable_segments: 'yes' is not a boolean", r.stderr)
        self.assertFalse(os.path.exists(marker))

    def test_exit_status_and_signals_are_the_programs(self):
        prog = self.program("import sys; sys.exit(7)")
        self.assertEqual(gardenalloc_run(["--", sys.executable, prog]).returncode, 7)
        prog = self.program("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", "kill.py")
        self.assertEqual(gardenalloc_run(["--", sys.executable, prog]).returncode, -signal.SIGTERM)
        r = gardenalloc_run(["--", "sh", "-c", 'echo "$GARDENALLOC_RUN"; exit 4'])
        self.assertEqual((r.returncode, r.stdout.strip()), (4, "replace"))

    def test_the_program_is_this_process(self):
        """exec: a signal sent to the process started reaches the program
        itself, and the program's pid is the one its parent knows."""
        prog = self.program("""
            import os, signal, sys, time
            def bye(sig, frame):
                print("got", sig, flush=True); sys.exit(42)
            signal.signal(signal.SIGINT, bye)
            print("pid", os.getpid(), flush=True)
            time.sleep(60)
        """)
        boot = "import sys; sys.path.insert(0, %r); from gardenalloc.__main__ import main; sys.exit(main())" % SHIM
        p = subprocess.Popen([sys.executable, "-c", boot, "run", "--", sys.executable, prog], stdout=subprocess.PIPE,
                             text=True, env=env_for())
        try:
            line = p.stdout.readline()
            self.assertEqual(line.split(), ["pid", str(p.pid)])
            p.send_signal(signal.SIGINT)
            out, _ = p.communicate(timeout=30)
        finally:
            p.kill()
        self.assertEqual(p.returncode, 42)
        self.assertIn("got %d" % signal.SIGINT, out)

    def test_child_processes_get_it_too(self):
        prog = self.program("""
            import multiprocessing as mp, subprocess, sys

            def child(q):
                import torch
                q.put(report(mp.current_process().name))

            if __name__ == "__main__":
                r = subprocess.run([sys.executable, "-c", "import torch; print(torch.calls[-1][0])"],
                                   capture_output=True, text=True)
                print(json.dumps({"tag": "subprocess", "out": r.stdout.strip(), "err": r.stderr}))
                for method in ("spawn", "forkserver", "fork"):
                    ctx = mp.get_context(method)
                    if method == "fork":
                        import torch   # installed here, then inherited by the fork
                    q = ctx.Queue()
                    p = ctx.Process(target=child, args=(q,), name=method)
                    p.start()
                    out = q.get(timeout=60)
                    p.join(60)
                    print(json.dumps(dict(out, exitcode=p.exitcode)))
        """)
        outs = {o["tag"]: o for o in self.last_json(gardenalloc_run(["--", sys.executable, prog]))}
        self.assertEqual(outs["subprocess"]["out"], "change", outs["subprocess"]["err"])
        for method in ("spawn", "forkserver", "fork"):
            self.assertEqual(outs[method]["changes"], 1, method)
            self.assertTrue(outs[method]["hooks_match"], method)
            self.assertEqual(outs[method]["exitcode"], 0, method)

    def test_the_users_sitecustomize_still_runs(self):
        site = os.path.join(self.dir, "usersite")
        os.mkdir(site)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.environ['USER_SITECUSTOMIZE'] = __file__\n")
        prog = self.program("""
            import os, sitecustomize, torch
            print(json.dumps(dict(report(), user=os.environ.get("USER_SITECUSTOMIZE"),
                                  module=sitecustomize.__file__)))
        """)
        out = self.last_json(gardenalloc_run(["--", sys.executable, prog],
                                             env=env_for(PYTHONPATH=STANDIN + os.pathsep + site)))[0]
        self.assertEqual(out["user"], os.path.join(site, "sitecustomize.py"))
        self.assertEqual(out["module"], out["user"], "`import sitecustomize` is the user's")
        self.assertEqual(out["changes"], 1)

    def test_a_program_without_torch_is_left_alone(self):
        prog = self.program("import sys; print(json.dumps({'torch': 'torch' in sys.modules}))")
        self.assertEqual(self.last_json(gardenalloc_run(["--", sys.executable, prog]))[0], {"torch": False})

    def test_a_torch_that_cannot_take_it_fails_the_import_loudly(self):
        prog = self.program("import torch")
        r = gardenalloc_run(["--", sys.executable, prog], env=env_for(GA_STANDIN_CUDA="none"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("gardenalloc run: could not install gardenalloc as PyTorch's allocator", r.stderr)
        self.assertIn("needs a PyTorch built with CUDA", r.stderr)

    def test_a_missing_program_and_no_program(self):
        r = gardenalloc_run(["--", "no-such-program-here"])
        self.assertEqual(r.returncode, 127)
        self.assertIn("cannot run no-such-program-here", r.stderr)
        r = gardenalloc_run([])
        self.assertEqual(r.returncode, 2)
        self.assertIn("no PROGRAM given", r.stderr)

    def test_an_empty_program_and_a_configuration_that_is_not_text(self):
        r = gardenalloc_run(["--", ""])
        self.assertEqual(r.returncode, 2)
        self.assertIn("gardenalloc run: error: PROGRAM is empty ('')", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        r = gardenalloc_run(["--conf", os.fsdecode(b"expandable_segments:\xff"), "--", "true"])
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "gardenalloc run: --conf b'expandable_segments:\\xff' holds bytes that are not "
                                   "UTF-8 text: a configuration is key:value text (`ga-bench keys` lists the keys)\n")
        env = env_for()
        env["GARDENALLOC_CONF"] = os.fsdecode(b"backend:sim\xfe")
        r = gardenalloc_run(["--", "true"], env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("gardenalloc run: GARDENALLOC_CONF b'backend:sim\\xfe' holds bytes that are not UTF-8", r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    def test_pytorch_s_variable_is_refused_before_the_program_starts(self):
        marker = os.path.join(self.dir, "ran")
        prog = self.program("open(%r, 'w').close()" % marker)
        env = env_for(PYTORCH_CUDA_ALLOC_CONF="expandable_segment:True")
        del env["GARDENALLOC_CONF"]
        r = gardenalloc_run(["--", sys.executable, prog], env=env)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("gardenalloc run: gardenalloc: PYTORCH_CUDA_ALLOC_CONF: unrecognized key 'expandable_segment' "
                      "(did you mean 'expandable_segments'?)", r.stderr)
        self.assertFalse(os.path.exists(marker), "the program did not run")
        env["GARDENALLOC_IGNORE_KEYS"] = "expandable_segment"
        r = gardenalloc_run(["--", sys.executable, prog], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(marker))

    def test_the_command_line(self):
        boot = "import sys; sys.path.insert(0, %r); from gardenalloc.__main__ import main; sys.exit(main())" % SHIM
        r = subprocess.run([sys.executable, "-c", boot, "nope"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command 'nope'", r.stderr)
        r = subprocess.run([sys.executable, "-c", boot, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        self.assertIn("run ", r.stdout)
        r = subprocess.run([sys.executable, "-m", "gardenalloc", "run", "--help"], capture_output=True, text=True,
                           cwd=SHIM)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--conf STR", r.stdout)


if __name__ == "__main__":
    unittest.main()
