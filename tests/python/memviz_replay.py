"""The segment replay of PyTorch's memory viewer (MemoryViz.js, the page
behind pytorch.org/memory_viz, "Allocator State History"), reimplemented to
test snapshots against it without a browser.

Clicking event i in that view rebuilds the allocator's state at i: it starts
from the snapshot's segments and live blocks and undoes the trace's events
from the last one down to i + 1, then places every live block in the segment
that contains it. This module follows the viewer's rules step for step and
raises ViewerError wherever the viewer itself would throw (reading a field of
a segment or block that is not there):

* events are first annotated: a free_requested immediately followed by the
  free_completed of the same address becomes one 'free' event; streams are
  renamed 0, 1, 2... in order of appearance, and when every event is on the
  default stream the events' stream becomes null (the segments' stays 0, so
  a range mapped back by undoing an event never merges with a segment of the
  snapshot);
* undoing alloc deletes the block; free / free_completed re-create it;
  free_requested clears the pending flag of a block that must exist;
* undoing segment_free / segment_alloc inserts / removes a whole segment
  (removal by exact address);
* undoing segment_unmap maps the range back: inserted in address order and
  merged with a neighbour that touches it on the same stream;
* undoing segment_map unmaps the range: it must lie inside one segment,
  which is cut at the front, at the back, or in two;
* then every live block must lie inside some segment.

The reference for this module is the viewer itself: tests/viz/README.md says
how to drive the real MemoryViz.js in headless Chromium on the same snapshot.
"""


class ViewerError(Exception):
    pass


def annotate(snapshot):
    """The device traces as the viewer sees them (free pairs elided, streams
    renamed to small numbers); the snapshot is not changed."""
    names = {0: 0}

    def stream(s):
        if s not in names:
            names[s] = len(names)
        return names[s]

    traces = []
    for trace in snapshot["device_traces"]:
        out = []
        for t in trace:
            t = dict(t)
            t["stream"] = stream(t.get("stream"))
            if t["action"] == "free_completed" and out:
                prev = out[-1]
                if prev["action"] == "free_requested" and prev.get("addr") == t.get("addr"):
                    prev["action"] = "free"
                    continue
            out.append(t)
        traces.append(out)
    if len(names) == 1:  # every event on the default stream: the viewer prints no stream, and sets
        for out in traces:  # the events' stream to null, while the segments keep their 0
            for t in out:
                t["stream"] = None
    segments = []
    for seg in snapshot["segments"]:
        seg = dict(seg)
        seg["stream"] = stream(seg.get("stream"))
        addr = seg["address"]
        blocks = []
        for b in seg["blocks"]:
            b = dict(b)
            b["addr"] = addr  # the viewer places blocks by the running offset, not b['address']
            if "frames" not in b:
                b["requested_size"] = b.get("requested_size") or b["size"]
            addr += b["size"]
            blocks.append(b)
        seg["blocks"] = blocks
        segments.append(seg)
    return segments, traces


class _State:
    """The viewer's state while it undoes events from the end."""

    def __init__(self, snapshot, device):
        segments, traces = annotate(snapshot)
        self.events = traces[device]
        self.segs = []
        self.blocks = {}
        for seg in segments:
            if seg.get("device") != device:
                continue
            self.segs.append({"addr": seg["address"], "size": seg["total_size"], "stream": seg["stream"]})
            for b in seg["blocks"]:
                if b["state"] in ("active_pending_free", "active_allocated"):
                    self.blocks[b["addr"]] = {"addr": b["addr"], "size": b["size"],
                                              "requested_size": b["requested_size"],
                                              "free_requested": b["state"] == "active_pending_free"}
        self.segs.sort(key=lambda s: s["addr"])

    def map_segment(self, merge, seg):
        segs = self.segs
        i = next((k for k, e in enumerate(segs) if e["addr"] > seg["addr"]), -1)
        if not merge:
            segs.insert(i if i >= 0 else max(len(segs) - 1, 0), seg)  # JS splice(-1, 0, x)
            return
        if i == -1:
            i = len(segs)
        segs.insert(i, seg)
        if i + 1 < len(segs):
            nxt = segs[i + 1]
            if seg["addr"] + seg["size"] == nxt["addr"] and seg["stream"] == nxt["stream"]:
                seg["size"] += nxt["size"]
                del segs[i + 1]
        if i > 0:
            prev = segs[i - 1]
            if prev["addr"] + prev["size"] == seg["addr"] and prev["stream"] == seg["stream"]:
                prev["size"] += seg["size"]
                del segs[i]

    def unmap_segment(self, merge, seg, where):
        segs = self.segs
        if not merge:
            i = next((k for k, e in enumerate(segs) if e["addr"] == seg["addr"]), -1)
            if segs:
                del segs[i]  # JS splice(-1, 1) removes the last one
            return
        end = seg["addr"] + seg["size"]
        i = next((k for k, e in enumerate(segs) if e["addr"] <= seg["addr"] and end <= e["addr"] + e["size"]), -1)
        if i < 0:
            raise ViewerError("%s: unmap_segment finds no segment holding [%#x, %#x) (TypeError: Cannot read "
                              "properties of undefined (reading 'addr'))" % (where, seg["addr"], end))
        ex = segs[i]
        ex_end = ex["addr"] + ex["size"]
        if ex["addr"] == seg["addr"]:
            ex["addr"] += seg["size"]
            ex["size"] -= seg["size"]
            if ex["size"] == 0:
                del segs[i]
        elif ex_end == end:
            ex["size"] -= seg["size"]
        else:
            ex["size"] = seg["addr"] - ex["addr"]
            segs.insert(i + 1, {"addr": end, "size": ex_end - end, "stream": seg["stream"]})

    def undo(self, k):
        """Undoes event k; returns the blocks to check ('all' after a segment change)."""
        e = self.events[k]
        where = "event %d (%s)" % (k, e["action"])
        a = e["action"]
        if a in ("free", "free_completed"):
            self.blocks[e["addr"]] = {"addr": e["addr"], "size": e["size"], "requested_size": e["size"],
                                      "free_requested": a == "free_completed"}
            return [e["addr"]]
        if a == "free_requested":
            if e["addr"] not in self.blocks:
                raise ViewerError("%s: no block at %#x (TypeError: Cannot set properties of undefined)"
                                  % (where, e["addr"]))
            self.blocks[e["addr"]]["free_requested"] = False
        elif a == "alloc":
            self.blocks.pop(e["addr"], None)
        elif a in ("segment_free", "segment_unmap"):
            self.map_segment(a == "segment_unmap", {"addr": e["addr"], "size": e["size"], "stream": e["stream"]})
            return "all"
        elif a in ("segment_alloc", "segment_map"):
            self.unmap_segment(a == "segment_map", {"addr": e["addr"], "size": e["size"], "stream": e["stream"]},
                               where)
            return "all"
        return []

    def check(self, which, idx):
        addrs = self.blocks if which == "all" else which
        for addr in addrs:
            if not any(s["addr"] <= addr < s["addr"] + s["size"] for s in self.segs):
                raise ViewerError("after event %d: block %#x lies in no segment (TypeError: Cannot read "
                                  "properties of null (reading 'occupied'))" % (idx, addr))


def state_at(snapshot, device, idx):
    """(segments, blocks) as the viewer draws them after event idx (-1: before
    the first event). Raises ViewerError where the viewer throws."""
    st = _State(snapshot, device)
    st.check("all", len(st.events) - 1)
    for k in range(len(st.events) - 1, idx, -1):
        st.undo(k)
    st.check("all", idx)
    return st.segs, list(st.blocks.values())


def check_every_event(snapshot, device=0):
    """Clicks every event of the device's trace, from the last to before the
    first (one sweep: the state after undoing event k is the state the viewer
    draws for event k - 1); returns the number of events the viewer lists.
    ViewerError on the first that breaks."""
    st = _State(snapshot, device)
    st.check("all", len(st.events) - 1)
    for k in range(len(st.events) - 1, -1, -1):
        st.check(st.undo(k), k - 1)
    return len(st.events)
