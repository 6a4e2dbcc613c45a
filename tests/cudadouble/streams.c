/* streams.c — streams, events, synchronisation and graph capture in the CUDA
 * driver double.
 *
 * No kernel ever runs here: a stream "has work running" only while a test
 * holds it (cudadouble_hold_stream). An event recorded on a held stream stays
 * pending until the stream is released or something waits for it.
 *
 * Capture follows the driver's rules: the legacy stream may not capture and
 * is unusable while a blocking stream of its context captures; a capturing
 * stream may not be synchronised; an event last recorded inside a capture may
 * not be queried or waited for; potentially unsafe calls are refused by the
 * thread's capture mode (core.c); a refused call invalidates the capture and
 * cuStreamEndCapture then returns no graph.
 */
#include <stdlib.h>

#include "double.h"

#define STREAM_MAGIC 0x57EAu
#define EVENT_MAGIC  0xE7E7u
#define GRAPH_MAGIC  0x6A6Au

/* ---- Arguments ---- */

CUresult cd_stream_arg(cd_entry e, CUstream in, CUstream *stream, struct CUctx_st **ctx) {
  if (in == CU_STREAM_PER_THREAD) cd_die(e, "the per-thread default stream is not modelled");
  if (in == NULL || in == CU_STREAM_LEGACY) {
    *stream = NULL;
    return cd_need_context(e, ctx);
  }
  if (!cd_ptrs_has(&cd.streams, in))
    cd_die(e, "%p is not a live stream (the driver would crash)", (void *)in);
  *stream = in;
  *ctx = in->ctx;
  return CUDA_SUCCESS;
}

static struct CUevent_st *event_arg(cd_entry e, CUevent ev) {
  if (!cd_ptrs_has(&cd.events, ev)) cd_die(e, "%p is not a live event (the driver would crash)", (void *)ev);
  return ev;
}

int cd_blocking_capture(const struct CUctx_st *ctx) {
  for (size_t i = 0; i < cd.streams.n; i++) {
    const struct CUstream_st *stream = cd.streams.v[i];
    if (stream->ctx == ctx && stream->flags == CU_STREAM_DEFAULT && stream->cap.active) return 1;
  }
  return 0;
}

/* The legacy stream was used while a blocking stream captures: that capture
 * would depend on it, so the driver invalidates it. */
static CUresult legacy_implicit(cd_entry e, const struct CUctx_st *ctx) {
  for (size_t i = 0; i < cd.streams.n; i++) {
    struct CUstream_st *stream = cd.streams.v[i];
    if (stream->ctx == ctx && stream->flags == CU_STREAM_DEFAULT && stream->cap.active)
      stream->cap.invalidated = 1;
  }
  cd.captures_broken++;
  return cd_refuse(e, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                   "the legacy stream was used while a blocking stream of its context captures");
}

/* Completes the work of events recorded on s (NULL: the legacy stream of
 * ctx). Returns whether any was pending. */
static int complete(const struct CUctx_st *ctx, CUstream stream) {
  int any = 0;
  for (size_t i = 0; i < cd.events.n; i++) {
    struct CUevent_st *ev = cd.events.v[i];
    if (ev->pending && ev->ctx == ctx && ev->stream == stream) ev->pending = 0, any = 1;
  }
  return any;
}

/* ---- Streams ---- */

CD_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  const cd_entry e = CD_STREAM_CREATE;
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  if (!phStream) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "phStream is NULL"));
  if (Flags != CU_STREAM_DEFAULT && Flags != CU_STREAM_NON_BLOCKING)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "Flags 0x%x", Flags));
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  struct CUstream_st *stream = calloc(1, sizeof *stream);
  if (!stream || cd_ptrs_add(&cd.streams, stream)) {
    free(stream);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  *stream = (struct CUstream_st){.magic = STREAM_MAGIC, .ctx = ctx, .flags = Flags};
  *phStream = stream;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  const cd_entry e = CD_STREAM_DESTROY;
  struct CUctx_st *ctx;
  CUstream stream;
  CUresult r = cd_enter(e);
  if (r || (r = cd_stream_arg(e, hStream, &stream, &ctx))) return cd_leave(r);
  if (!stream) cd_die(e, "the legacy stream cannot be destroyed");
  if (stream->cap.active) cd_die(e, "destroying a capturing stream is not modelled");
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  (void)complete(ctx, stream); /* its work finishes on its own */
  for (size_t i = 0; i < cd.events.n; i++) {
    struct CUevent_st *ev = cd.events.v[i];
    if (ev->stream == stream) ev->stream = NULL;
  }
  cd_ptrs_remove(&cd.streams, stream);
  stream->magic = 0;
  free(stream);
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  const cd_entry e = CD_STREAM_SYNCHRONIZE;
  struct CUctx_st *ctx;
  CUstream stream;
  CUresult r = cd_enter(e);
  if (r || (r = cd_stream_arg(e, hStream, &stream, &ctx))) return cd_leave(r);
  if (stream && stream->cap.active) {
    stream->cap.invalidated = 1;
    cd.captures_broken++;
    return cd_leave(cd_refuse(e, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                              "the stream is capturing (the capture is invalidated)"));
  }
  if (!stream && cd_blocking_capture(ctx)) return cd_leave(legacy_implicit(e, ctx));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  int held = stream ? stream->held : ctx->legacy_held, waited = complete(ctx, stream);
  if (!stream) /* the legacy stream waits for the blocking streams too */
    for (size_t i = 0; i < cd.streams.n; i++) {
      struct CUstream_st *b = cd.streams.v[i];
      if (b->ctx == ctx && b->flags == CU_STREAM_DEFAULT) waited |= complete(ctx, b) | b->held;
    }
  if (waited || held) cd.waits++;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuCtxSynchronize(void) {
  const cd_entry e = CD_CTX_SYNCHRONIZE;
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  for (size_t i = 0; i < cd.streams.n; i++) {
    struct CUstream_st *stream = cd.streams.v[i];
    if (stream->ctx != ctx || !stream->cap.active) continue;
    stream->cap.invalidated = 1;
    cd.captures_broken++;
    return cd_leave(cd_refuse(e, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                              "a stream of the context is capturing (the capture is invalidated)"));
  }
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  int waited = 0;
  for (size_t i = 0; i < cd.events.n; i++) {
    struct CUevent_st *ev = cd.events.v[i];
    if (ev->ctx == ctx && ev->pending) ev->pending = 0, waited = 1;
  }
  cd.waits += (uint64_t)waited;
  return cd_leave(r);
}

/* ---- Capture ---- */

CD_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  const cd_entry e = CD_STREAM_IS_CAPTURING;
  struct CUctx_st *ctx;
  CUstream stream;
  CUresult r = cd_enter(e);
  if (r || (r = cd_stream_arg(e, hStream, &stream, &ctx))) return cd_leave(r);
  if (!captureStatus) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "captureStatus is NULL"));
  if (!stream && cd_blocking_capture(ctx)) /* documented: an error, and the capture is not invalidated */
    return cd_leave(cd_refuse(e, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                              "asked of the legacy stream while a blocking stream of its context captures"));
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  *captureStatus = !stream || !stream->cap.active ? CU_STREAM_CAPTURE_STATUS_NONE
                   : stream->cap.invalidated      ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                  : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
  const cd_entry e = CD_STREAM_BEGIN_CAPTURE;
  struct CUctx_st *ctx;
  CUstream stream;
  CUresult r = cd_enter(e);
  if (r || (r = cd_stream_arg(e, hStream, &stream, &ctx))) return cd_leave(r);
  if (!stream) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "the legacy stream may not capture"));
  if (!cd_mode_valid(mode)) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "mode %d", (int)mode));
  if (stream->cap.active)
    return cd_leave(cd_refuse(e, CUDA_ERROR_ILLEGAL_STATE, "the stream is already capturing"));
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  stream->cap = (cd_capture){.active = 1, .mode = mode, .thread = pthread_self()};
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  const cd_entry e = CD_STREAM_END_CAPTURE;
  struct CUctx_st *ctx;
  CUstream stream;
  CUresult r = cd_enter(e);
  if (r || (r = cd_stream_arg(e, hStream, &stream, &ctx))) return cd_leave(r);
  if (!phGraph) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "phGraph is NULL"));
  if (!stream || !stream->cap.active)
    return cd_leave(cd_refuse(e, CUDA_ERROR_ILLEGAL_STATE, "the stream is not capturing"));
  if (stream->cap.mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      !pthread_equal(stream->cap.thread, pthread_self()))
    return cd_leave(
        cd_refuse(e, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "the capture began on another thread"));
  int invalidated = stream->cap.invalidated;
  stream->cap = (cd_capture){0};
  *phGraph = NULL;
  if (invalidated) return cd_leave(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g || cd_ptrs_add(&cd.graphs, g)) {
    free(g);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  g->magic = GRAPH_MAGIC;
  *phGraph = g;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  const cd_entry e = CD_GRAPH_DESTROY;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  if (!cd_ptrs_has(&cd.graphs, hGraph)) cd_die(e, "%p is not a live graph", (void *)hGraph);
  cd_ptrs_remove(&cd.graphs, hGraph);
  hGraph->magic = 0;
  free(hGraph);
  return cd_leave(r);
}

/* ---- Events ---- */

CD_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  const cd_entry e = CD_EVENT_CREATE;
  struct CUctx_st *ctx;
  CUresult r = cd_enter(e);
  if (r || (r = cd_need_context(e, &ctx))) return cd_leave(r);
  if (!phEvent) return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "phEvent is NULL"));
  if (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "Flags 0x%x", Flags));
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
    return cd_leave(
        cd_refuse(e, CUDA_ERROR_INVALID_VALUE, "CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING too"));
  if (Flags & CU_EVENT_INTERPROCESS) cd_die(e, "interprocess events are not modelled");
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  if (!ev || cd_ptrs_add(&cd.events, ev)) {
    free(ev);
    return cd_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  *ev = (struct CUevent_st){.magic = EVENT_MAGIC, .ctx = ctx};
  *phEvent = ev;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  const cd_entry e = CD_EVENT_RECORD;
  struct CUctx_st *ctx;
  CUstream stream;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  struct CUevent_st *ev = event_arg(e, hEvent);
  if ((r = cd_stream_arg(e, hStream, &stream, &ctx))) return cd_leave(r);
  if (ev->ctx != ctx)
    return cd_leave(cd_refuse(e, CUDA_ERROR_INVALID_HANDLE,
                              "the event belongs to device %d's context and the stream to device %d's",
                              ev->ctx->ordinal, ctx->ordinal));
  if (!stream && cd_blocking_capture(ctx)) return cd_leave(legacy_implicit(e, ctx));
  if (stream && stream->cap.active && stream->cap.invalidated)
    return cd_leave(
        cd_refuse(e, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the stream's capture was invalidated"));
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  ev->stream = stream;
  ev->recorded = 1;
  ev->captured = stream && stream->cap.active; /* a node of the graph, not work that runs now */
  ev->pending = !ev->captured && (stream ? stream->held : ctx->legacy_held);
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  const cd_entry e = CD_EVENT_QUERY;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  struct CUevent_st *ev = event_arg(e, hEvent);
  if (ev->captured)
    return cd_leave(cd_refuse(e, CUDA_ERROR_CAPTURED_EVENT, "the event was last recorded inside a capture"));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  return cd_leave(ev->pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS);
}

CD_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  const cd_entry e = CD_EVENT_SYNCHRONIZE;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  struct CUevent_st *ev = event_arg(e, hEvent);
  if (ev->captured)
    return cd_leave(cd_refuse(e, CUDA_ERROR_CAPTURED_EVENT, "the event was last recorded inside a capture"));
  if ((r = cd_capture_unsafe(e)) || (r = cd_fault_hit(e))) return cd_leave(r);
  if (ev->pending) ev->pending = 0, cd.waits++;
  return cd_leave(r);
}

CD_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
  const cd_entry e = CD_EVENT_DESTROY;
  CUresult r = cd_enter(e);
  if (r) return cd_leave(r);
  struct CUevent_st *ev = event_arg(e, hEvent);
  if ((r = cd_fault_hit(e))) return cd_leave(r);
  /* Documented: destroying an event whose work is pending is fine. */
  cd_ptrs_remove(&cd.events, ev);
  ev->magic = 0;
  free(ev);
  return cd_leave(r);
}

/* ---- Test control and leaks ---- */

CD_EXPORT CUresult cudadouble_hold_stream(CUstream stream, int hold) {
  pthread_mutex_lock(&cd.mu);
  CUresult r = CUDA_SUCCESS;
  if (stream == NULL || stream == CU_STREAM_LEGACY) {
    if (!cd_current)
      r = CUDA_ERROR_INVALID_CONTEXT;
    else if (!(cd_current->legacy_held = hold))
      (void)complete(cd_current, NULL);
  } else if (!cd_ptrs_has(&cd.streams, stream)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else if (!(stream->held = hold)) {
    (void)complete(stream->ctx, stream);
  }
  pthread_mutex_unlock(&cd.mu);
  return r;
}

size_t cd_streams_describe_leaks(char *buf, size_t len, size_t *at) {
  size_t n = 0;
  for (size_t i = 0; i < cd.streams.n; i++, n++) {
    const struct CUstream_st *stream = cd.streams.v[i];
    cd_report(buf, len, at, "stream %p of device %d not destroyed%s\n", (void *)stream, stream->ctx->ordinal,
              stream->cap.active ? " (still capturing)" : "");
  }
  for (size_t i = 0; i < cd.events.n; i++, n++)
    cd_report(buf, len, at, "event %p of device %d not destroyed\n", cd.events.v[i],
              ((const struct CUevent_st *)cd.events.v[i])->ctx->ordinal);
  for (size_t i = 0; i < cd.graphs.n; i++, n++)
    cd_report(buf, len, at, "graph %p not destroyed\n", cd.graphs.v[i]);
  return n;
}
