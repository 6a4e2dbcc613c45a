"""One GPU scenario per process: python3 scenarios.py MODE SCENARIO.

MODE: replace (gardenalloc is PyTorch's allocator), mempool (a MemPool backed
by gardenalloc), pytorch (PyTorch's own allocator, for the baseline), run
(started by `gardenalloc run`, which installed it: the program has no code
for it).
Prints its figures; exits non-zero on failure."""
import os
import sys
import time

mode, scenario = sys.argv[1], sys.argv[2]
conf = os.environ.get("GARDENALLOC_CONF", "backend:cuda")
if mode == "replace":
    import gardenalloc.torch
    gardenalloc.torch.install(conf)
import torch  # noqa: E402

dev = torch.device("cuda", 0)
pool = None
if mode == "mempool":
    import gardenalloc.torch
    pool = gardenalloc.torch.mempool(conf)


class Ctx:
    def __enter__(self):
        self.c = torch.cuda.use_mem_pool(pool) if pool is not None else None
        return self.c.__enter__() if self.c else None

    def __exit__(self, *a):
        return self.c.__exit__(*a) if self.c else False


def fuzz():
    import random
    r = random.Random(7)
    live = []
    for step in range(10000):
        if live and r.random() < 0.45:
            t, v = live.pop(r.randrange(len(live)))
            assert int(t[0].item()) == v and int(t[-1].item()) == v, "contents changed at step %d" % step
        else:
            n = r.choice([1, 100, 4096, 1 << 18, 1 << 20, 3 << 20]) + r.randrange(1000)
            v = step % 120
            t = torch.full((n,), v, dtype=torch.uint8, device=dev)
            live.append((t, v))
        if step % 2000 == 1999:
            torch.cuda.empty_cache()
    torch.cuda.synchronize()


def oom():
    free, total = torch.cuda.mem_get_info()
    try:
        torch.empty(int(total * 2), dtype=torch.uint8, device=dev)
    except (RuntimeError, torch.OutOfMemoryError) as e:
        assert "out of memory" in str(e), str(e)
        print("OOM raised:", str(e)[:200])
    else:
        raise AssertionError("no OOM")
    x = torch.ones(1 << 20, device=dev)  # still usable
    assert float(x.sum()) == float(1 << 20)


def oom_retry():
    free, total = torch.cuda.mem_get_info()
    chunk = int(free * 0.4)
    a = torch.empty(chunk, dtype=torch.uint8, device=dev)
    b = torch.empty(chunk, dtype=torch.uint8, device=dev)
    del a, b  # cached
    c = torch.empty(int(free * 0.85), dtype=torch.uint8, device=dev)  # needs the cache flushed
    del c


def record_stream():
    s = torch.cuda.Stream()
    x = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # keep s busy
        y = x + 1  # noqa: F841
    x.record_stream(s)
    ptr = x.data_ptr()
    del x
    z = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
    assert z.data_ptr() != ptr, "reused while the other stream may still read it"
    s.synchronize()


def installed_by_run():
    """Under `gardenalloc run` with only PYTORCH_CUDA_ALLOC_CONF set: the
    allocator serves the tensors, with PyTorch's setting applied; a Python
    child process gets it too."""
    import subprocess
    import gardenalloc
    assert torch.cuda.get_allocator_backend() == "pluggable", torch.cuda.get_allocator_backend()
    x = torch.ones(64 << 20, dtype=torch.uint8, device=dev)
    s = gardenalloc.memory_stats()
    assert s["allocated_bytes.all.current"] >= 64 << 20, s["allocated_bytes.all.current"]
    assert gardenalloc.configuration() == ("expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF"), \
        gardenalloc.configuration()
    assert s["mapped_granules"] > 0, "expandable segments from PYTORCH_CUDA_ALLOC_CONF"
    assert int(x.sum()) == 64 << 20
    child = subprocess.run([sys.executable, "-c", "import torch, gardenalloc; t = torch.ones(1 << 20, device='cuda');"
                            " print(gardenalloc.memory_stats()['allocation.all.current'])"],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and int(child.stdout.split()[-1]) >= 1, child.stderr
    print("gardenalloc run: %d MiB allocated through gardenalloc, child process too" % (s["allocated_bytes.all.current"] >> 20))


def refused_after_init():
    """install() after CUDA is initialised: refused by name, and PyTorch's
    allocator stays."""
    import gardenalloc.torch
    torch.ones(1, device=dev)
    try:
        gardenalloc.torch.install(conf)
    except RuntimeError as e:
        assert "before CUDA is initialised" in str(e), str(e)
    else:
        raise AssertionError("install() after CUDA init was accepted")
    assert torch.cuda.get_allocator_backend() == "native"


def graph():
    """torch.cuda.graph through the allocator's pool hooks: memory allocated
    during the capture comes from the graph's pool and is there at replay."""
    x = torch.ones(1 << 20, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            y = x * 2 + 1  # warm-up outside the capture, as PyTorch asks
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1
        z = torch.empty(8 << 20, dtype=torch.uint8, device=dev)
        z.fill_(3)
    x.fill_(5)
    g.replay()
    torch.cuda.synchronize()
    assert bool(torch.all(y == 11)) and int(z[-1]) == 3, "the replay's results"
    del g, y, z
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    print("graph: captured with an 8 MiB allocation inside, replayed, released")


def trace():
    shared = os.environ.get("GA_SHARED_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    path = os.path.join(shared, "traces", "pytorch_snapshots", "cs336_medium_ctx512_training.csv")
    rows = [line.rstrip("\n").split(",") for line in open(path)][1:]
    live = {}
    torch.cuda.reset_peak_memory_stats() if mode == "pytorch" else None
    t0 = time.time()
    for _, _, action, ptr, size, _ in rows:
        if action == "allocate":
            live[ptr] = torch.empty(int(size), dtype=torch.uint8, device=dev)
        else:
            del live[ptr]
    torch.cuda.synchronize()
    secs = time.time() - t0
    if mode == "pytorch":
        peak = torch.cuda.max_memory_reserved()
    else:
        import gardenalloc
        peak = gardenalloc.memory_stats()["reserved_bytes.all.peak"]
    print("trace %s: peak reserved %.2f GiB, %.3f s (%s)" % (os.path.basename(path), peak / 2**30, secs, mode))


with Ctx():
    {"fuzz": fuzz, "oom": oom, "oom_retry": oom_retry, "record_stream": record_stream, "trace": trace,
     "graph": graph,
     "installed_by_run": installed_by_run, "refused_after_init": refused_after_init}[scenario]()
print("ok", mode, scenario)
