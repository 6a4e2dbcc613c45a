#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz harnesses into corpus/ (and the
inputs that once broke a promise into crashes/): run it after changing the
input format of a harness. libFuzzer grows its own corpus from these
(tests/fuzz.sh keeps that in the build folder). The inputs libFuzzer itself
found breaking a promise are kept in crashes/ as it wrote them (minimised);
this script leaves them alone."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def write(kind, name, data):
    d = os.path.join(HERE, kind)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


# ---- fuzz_config: configuration strings ----
CONFIG = {
    "empty": "",
    "pytorch_defaults": "max_split_size_mb:128,garbage_collection_threshold:0.6,expandable_segments:False",
    "expandable": "backend:sim,sim_capacity_mb:1024,expandable_segments:True",
    "expandable_knobs": "expandable_segments:True,expandable_page_size_mb:4,expandable_cache_max_mb:8,"
                        "expandable_move_pages:when_full",
    "roundup_list": "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "roundup_single": "roundup_power2_divisions:4,max_non_split_rounding_mb:64",
    "fraction_gc": "per_process_memory_fraction:0.5,garbage_collection_threshold:0.8,max_split_size_mb:40",
    "large_segment": "large_segment_size_mb:32,max_split_size_mb:64",
    "compat_keys": "release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,"
                   "pinned_num_register_threads:8,pinned_use_background_threads:False,"
                   "pinned_reserve_segment_size_mb:64,graph_capture_record_stream_reuse:True",
    "whitespace": " backend : sim , sim_devices : 2 , sim_capacity_mb : 64 ",
    "largest_values": "backend:sim,sim_capacity_mb:16777216,max_split_size_mb:1099511627776,"
                      "expandable_segments:True,expandable_page_size_mb:1099511627776",
    "native_backend": "backend:native,expandable_segments:True",
    "expandable_policy": "expandable_segments:True,expandable_policy:pytorch,expandable_move_hold:1099511627776",
    "move_hold": "expandable_segments:True,expandable_move_pages:settle,expandable_move_hold:10",
    "move_always": "expandable_segments:True,expandable_move_pages:always,expandable_page_size_mb:2",
    "move_settle": "expandable_segments:True,expandable_move_pages:settle,expandable_cache_max_mb:0",
    "bad_key": "no_such_key:1",
    "bad_value": "max_split_size_mb:lots",
    "bad_list": "roundup_power2_divisions:[256:4",
    "page_size_2_64": "backend:sim,expandable_segments:True,expandable_page_size_mb:18446744073709551614",
}
for name, s in CONFIG.items():
    write("corpus/config", name, s)
# These validated, then ga_create died (SIGFPE: a page size rounded past
# SIZE_MAX to 0 and divided by) or refused them as a device error.
write("crashes/config", "large_segment_size_2_64", "backend:sim,large_segment_size_mb:18446744073709551615")
write("crashes/config", "large_segment_size_2_44", "backend:sim,large_segment_size_mb:17592186044415")
write("crashes/config", "sim_capacity_2_64", "backend:sim,sim_capacity_mb:18446744073709551615")
# A page of 67 TiB on a 16 MiB device: a segment's reservation was a whole
# page (33 million granules), 13 s for this input under the sanitizers.
write("crashes/config", "page_size_past_the_device",
      "sim_capacity_mb:16,backend:sim,expandable_segments:True,expandable_page_size_mb:70000100")

# ---- fuzz_ops: operation sequences (the byte format of fuzz_ops.c) ----
# byte 0: configuration (c % 7) and device size ((c / 7) % 3); then per
# operation a byte (op % 20) and its arguments.
NATIVE, GC, EXP, EXP2, EXP4, EXP_PYTORCH, EXP_HOLD = range(7)


def conf(c, size=1):
    return [c + 7 * size]


def malloc(stream, cls, hi, lo, seed=7):
    return [0, stream, cls, hi, lo, seed]


def free(i):
    return [6, i]


def record(i, stream):
    return [9, i, stream]


def hold(k):
    return [10, k]


EMPTY = [11]


def tag(i, t):  # t: 0 "kv", 1 "w", 2 none
    return [12, i, t]


def sleep(which, offload):  # which: 0 kv, 1 w, 2 kv,w, 3 none
    return [13, which | (4 if offload else 0)]


WAKE = [14]


def capture(arg=1):  # begin when not routed; else arg % 3: 0 release another, 1 end + release, 2 end
    return [15, arg]


def fraction(b):
    return [16, b]


def peer(b):  # ordinal b % 5 - 2: 3 is device 1
    return [17, b]


def fault(kind, nth, oom):
    return [18, kind, nth, oom]


CLEAR = [19, 1]


def misc(b):  # b % 9: 0 stats JSON, 1 snapshot, 2 history, 3 reset peaks, 4 bad free, 5 bad fraction,
    # 6 allocation size, 7 reset counters, 8 a bad argument ((b >> 3) % 4: size 0, huge, long tag,
    # record_stream of a bad pointer: 35, 8, 17, 26)
    return [19, 0, b]


def seq(*parts):
    out = []
    for p in parts:
        out += p
    return out


for c, name in ((NATIVE, "native"), (GC, "gc"), (EXP, "expandable"), (EXP2, "expandable_2m"), (EXP4, "exp4"),
                (EXP_PYTORCH, "exp_pytorch"), (EXP_HOLD, "exp_hold")):
    write("corpus/ops", name + "_mix", seq(
        conf(c), malloc(0, 1, 10, 1), malloc(1, 2, 40, 0), malloc(2, 3, 9, 9), malloc(0, 4, 1, 0), free(1),
        record(0, 1), hold(1), free(0), EMPTY, hold(1), malloc(1, 2, 3, 3), tag(0, 0), sleep(0, True), WAKE,
        misc(0), misc(1), misc(2 + 9 * 8), misc(4), misc(35), misc(8), misc(17), misc(26), misc(5), misc(6),
        EMPTY))
    write("corpus/ops", name + "_capture", seq(
        conf(c), malloc(0, 2, 20, 0), malloc(2, 3, 2, 0), free(0), hold(2), record(0, 2), capture(),
        malloc(2, 2, 5, 0), EMPTY, sleep(3, False), malloc(2, 1, 1, 1), free(1), capture(2), EMPTY))
    write("corpus/ops", name + "_faults", seq(
        conf(c, 0), fault(4, 1, 1), malloc(0, 3, 60, 0), fault(6, 2, 0), malloc(1, 2, 30, 0), fault(1, 1, 0),
        EMPTY, fault(13, 1, 0), free(0), EMPTY, CLEAR, malloc(0, 4, 30, 0), malloc(1, 4, 30, 0),
        malloc(2, 4, 30, 0), fraction(64), malloc(0, 4, 10, 0), fraction(200)))
    write("corpus/ops", name + "_sleep_peer", seq(
        conf(c), malloc(0, 2, 200, 0), malloc(0, 3, 3, 0), tag(0, 0), tag(1, 1), sleep(2, True), peer(3),
        malloc(1, 2, 10, 0), sleep(0, False), WAKE, peer(0), peer(4), free(0), free(0)))
# These invalidated a capture: empty_cache freed native segments and
# synchronised the stream of expandable memory, wake created memory, a sleep
# without tags synchronised the device, all in the global capture mode.
write("crashes/ops", "empty_cache_during_capture_native", seq(
    conf(NATIVE), malloc(0, 2, 40, 0), free(0), capture(), EMPTY))
write("crashes/ops", "empty_cache_during_capture_expandable", seq(
    conf(EXP), malloc(2, 2, 40, 0), free(0), capture(), EMPTY))
write("crashes/ops", "wake_during_capture", seq(
    conf(EXP2), malloc(0, 3, 40, 0), tag(0, 0), sleep(0, True), capture(), WAKE))
write("crashes/ops", "sleep_without_tags_during_capture", seq(conf(EXP), malloc(0, 2, 3, 0), capture(),
                                                              sleep(3, False)))
# A wake that fails half-way (the second copy back), then a sleep without
# offload: what that wake restored is discarded again (the harness's model
# once missed it and called the allocation's bytes lost).
write("crashes/ops", "sleep_without_offload_after_a_half_failed_wake", seq(
    conf(EXP2), malloc(0, 2, 106, 170), malloc(1, 1, 0, 9), tag(0, 0), sleep(0, True), fault(18, 1, 0), WAKE,
    sleep(0, False), free(1), WAKE))

# ---- fuzz_trace: RMM CSV traces ----
HEAD = "Thread,Time,Action,Pointer,Size,Stream\n"
write("corpus/trace", "small", HEAD + "1,00:00:00.1,allocate,0x1,16777216,0\n1,00:00:00.2,allocate,0x2,1000,0\n"
      "1,0,allocate failure,0x0,99999999999,0\n1,0,free,0x1,16777216,0\n1,0,allocate,0x3,8388608,0x7\n"
      "1,0,free,0x2,1000,0\n1,0,free,0x3,8388608,0x7\n")
write("corpus/trace", "crlf_no_header", "1,0,allocate,0x10,4096,3\r\n1,0,free,0x10,4096,3\r\n")
write("corpus/trace", "oom", "1,0,allocate,0x1,134217728,0\n1,0,allocate,0x2,200000000,0\n1,0,free,0x2,0,0\n"
      "1,0,free,0x1,0,0\n")
write("corpus/trace", "bad_line", HEAD + "1,0,allocate,0x1,100,0\n1,0,allocate,0x2\n")
write("corpus/trace", "double_free", "1,0,allocate,0x1,100,0\n1,0,free,0x1,100,0\n1,0,free,0x1,100,0\n")
write("corpus/trace", "streams", "".join("1,0,allocate,0x%x,%d,%d\n" % (i, 1000 * i + 1, i % 3) for i in range(1, 40))
      + "".join("1,0,free,0x%x,0,%d\n" % (i, i % 3) for i in range(39, 0, -2)))
real = os.path.join(HERE, "..", "..", "traces", "pytorch_snapshots", "cs336_medium_ctx128_inference.csv")
if os.path.exists(real):
    with open(real) as f:
        write("corpus/trace", "real_head", "".join(f.readlines()[:300]))
# The id 2^64 - 1 wrapped to the table's empty marker: allocated twice, it was
# not refused as already live.
write("crashes/trace", "id_2_64_twice", "1,0,allocate,0xffffffffffffffff,100,0\n"
      "1,0,allocate,0xffffffffffffffff,100,0\n")
write("crashes/trace", "id_2_64_free", "1,0,allocate,0xffffffffffffffff,100,0\n"
      "1,0,free,0xffffffffffffffff,100,0\n1,0,free,0xffffffffffffffff,100,0\n")
write("crashes/trace", "nul_byte", b"1,0,allocate,0x1,100,0\n1,0,allo\0cate,0x2,100,0\n")

# ---- fuzz_streams: stream-ordered programs (the byte format of fuzz_streams.c) ----
# byte 0: configuration (c % 6) and lag in ms ((c / 6) % 8); then per operation
# a byte (op % 16) and its arguments. In the native configurations (0, 1)
# malloc reads no tag byte.
ST_NATIVE, ST_GC, ST_EXP, ST_EXP2, ST_MOVE, ST_PYTORCH = range(6)
EVENT_RECORD, STREAM_SYNC, SYNC, EVENT_QUERY, CREATE, MAP = 9, 13, 14, 10, 4, 6


def st_conf(c, lag_ms=2):
    return [c + 6 * lag_ms]


def st_malloc(stream, cls, hi, lo, seed=9, tag=None):
    return [0, stream, cls, hi, lo, seed] + ([] if tag is None else [tag])


def st_free(i):
    return [4, i]


def st_kernel(i, stream, us=50):
    return [7, i, stream, us]


def st_hold(k):
    return [9, k]


def st_cpu(b):
    return [10, b]


def st_lag(b):
    return [11, b]


ST_EMPTY = [12]
ST_WAKE = [13, 1]


def st_sleep(offload):
    return [13, 2 if offload else 0]


def st_fault(kind, nth, sticky, oom=False):
    return [14, kind, (nth - 1) % 8 | (8 if sticky else 0) | (16 if oom else 0)]


ST_CLEAR = [15, 1]

for c, name in ((ST_NATIVE, "native"), (ST_GC, "gc"), (ST_EXP, "expandable"), (ST_EXP2, "expandable_2m"),
                (ST_MOVE, "move_always"), (ST_PYTORCH, "exp_pytorch")):
    t = None if c in (ST_NATIVE, ST_GC) else 1
    m = lambda s, cls, hi, lo, seed=9: st_malloc(s, cls, hi, lo, seed, t)  # noqa: E731
    # Allocations on four streams, kernels of one on the others, a busy stream
    # held, frees, allocations that must not land on what the busy streams use.
    write("corpus/streams", name + "_lag", seq(
        st_conf(c, 3), m(0, 2, 100, 1), m(1, 3, 20, 0), m(2, 1, 255, 9), m(3, 0, 1, 200),
        st_kernel(0, 1), st_kernel(1, 2, 200), st_hold(2), st_kernel(2, 3), st_free(0), st_free(0),
        m(1, 2, 100, 1), m(2, 3, 20, 0), st_cpu(30), st_free(1), ST_EMPTY, m(0, 3, 40, 0), st_hold(2),
        st_cpu(200), m(3, 2, 50, 50), st_free(0), st_free(0), st_free(0), ST_EMPTY))
    # The same under sticky faults of the calls a free waits with.
    write("corpus/streams", name + "_sticky", seq(
        st_conf(c, 1), m(0, 2, 100, 1), m(1, 2, 60, 3), st_kernel(0, 1), st_hold(1), st_kernel(0, 1),
        st_fault(EVENT_RECORD, 1, True), st_fault(STREAM_SYNC, 1, True), st_fault(SYNC, 1, True), st_free(0),
        m(0, 2, 100, 1), m(2, 2, 100, 1), ST_EMPTY, ST_CLEAR, m(0, 2, 100, 1), st_hold(1), ST_EMPTY,
        m(1, 3, 10, 10)))
    # Sleep and wake while streams lag, with one-shot faults.
    write("corpus/streams", name + "_sleep", seq(
        st_conf(c, 5), m(0, 3, 80, 0), m(1, 2, 30, 30), m(0, 1, 9, 9), st_kernel(1, 2), st_sleep(True),
        m(2, 3, 10, 10), st_free(1), ST_WAKE, st_sleep(False), st_fault(CREATE, 1, False, True), ST_WAKE,
        ST_WAKE, st_fault(EVENT_QUERY, 2, False), st_kernel(0, 3), st_free(0), st_lag(0), m(3, 2, 1, 1),
        ST_EMPTY))

# ---- fuzz_torch: PyTorch's entry points (the byte format of fuzz_torch.cpp) ----
# per operation a byte (op % 14) and its arguments.


def tc_alloc(kind, device, stream, cls=2, hi=10, lo=10, seed=5):  # kind % 8: 6 size 0, 7 negative
    return [0, kind, device, stream] + ([9] if kind % 8 == 7 else [] if kind % 8 == 6 else [cls, hi, lo]) + \
        ([seed] if kind % 8 < 6 else [])


def tc_free(how, i=0):  # how % 8: 0-3 right, 4 wrong size, 5 wrong device, 6 wrong stream, 7 foreign
    return [4, how] + ([] if how % 8 == 7 else [i])


def tc_record(stream, i=0):
    return [7, stream, i]


def tc_base(b, i=0):
    return [8, b] + ([] if b & 7 == 7 else [i])


TC_RESET = [9]


def tc_fraction(b, device):
    return [10, b, device]


def tc_capture(b):
    return [11, b]


def tc_hold(device, stream):
    return [12, device | stream << 1]


TC_INIT = [13]

write("corpus/torch", "right_and_wrong", seq(
    tc_alloc(0, 0, 0), tc_alloc(1, 1, 1, 3, 4, 4), tc_alloc(2, 0, 2, 0, 0, 99), tc_alloc(6, 0, 0),
    tc_alloc(7, 1, 0), tc_alloc(0, 0x1f, 0), tc_alloc(0, 0x3f, 1), tc_base(3, 0), tc_base(200, 1), tc_base(7),
    tc_free(4, 0), tc_free(5, 0), tc_free(6, 0), tc_free(7), tc_free(15), tc_free(32 + 1, 0), TC_INIT,
    TC_RESET))
write("corpus/torch", "record_stream_held", seq(
    tc_alloc(0, 0, 0, 2, 50, 0), tc_hold(0, 1), tc_record(1, 0), tc_free(0, 0), tc_alloc(0, 0, 0, 2, 50, 0),
    tc_alloc(1, 0, 1, 2, 50, 0), tc_hold(0, 1), tc_alloc(0, 0, 0, 2, 50, 0), tc_record(0x30), TC_RESET,
    tc_free(0, 0), tc_free(0, 0), tc_free(0, 0)))
write("corpus/torch", "fraction_and_captures", seq(
    tc_fraction(30, 0), tc_alloc(0, 0, 0, 3, 200, 0), tc_alloc(0, 0, 0, 3, 255, 255), tc_fraction(250, 0),
    tc_fraction(245, 1), tc_fraction(200, 0), tc_capture(2), tc_alloc(0, 0, 1, 2, 10, 10),
    tc_alloc(0, 0, 0, 1, 10, 10), tc_capture(1), tc_capture(4), tc_alloc(0, 1, 2, 2, 5, 5), tc_capture(0),
    tc_capture(3), tc_free(0, 0), TC_RESET, tc_free(0, 0)))
