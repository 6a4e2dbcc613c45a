/* frames.c — C frames through backtrace() and dladdr(); Python frames
 * through the interpreter's own API, found with dlsym in the running process
 * (the library does not link Python).
 *
 * A Python frame is recorded as (code object, line). Each code object seen is
 * interned once, process-wide: the table keeps a reference to it (so its
 * address is never reused for another) and copies of its file and function
 * names, so snapshots are written without the GIL. The table only grows, by
 * one entry per distinct function that allocated: a Python program has a few
 * thousand at most.
 */
#include "frames.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "host.h"

/* ---- The interpreter's API ---- */

typedef struct py_api {
  int (*gil_check)(void);
  void *(*get_frame)(void);    /* PyEval_GetFrame: borrowed */
  void *(*frame_code)(void *); /* PyFrame_GetCode: new reference */
  void *(*frame_back)(void *); /* PyFrame_GetBack: new reference or NULL */
  int (*frame_line)(void *);   /* PyFrame_GetLineNumber */
  void *(*getattr)(void *, const char *);
  const char *(*utf8)(void *); /* PyUnicode_AsUTF8 */
  void (*incref)(void *);
  void (*decref)(void *);
  void (*err_clear)(void);
} py_api;

static py_api py;
static int py_ready; /* 1 found, -1 absent */
static pthread_mutex_t py_mu = PTHREAD_MUTEX_INITIALIZER;

int ga_frames_python_init(void) {
  pthread_mutex_lock(&py_mu);
  if (!py_ready) {
    py_api p;
    *(void **)&p.gil_check = dlsym(RTLD_DEFAULT, "PyGILState_Check");
    *(void **)&p.get_frame = dlsym(RTLD_DEFAULT, "PyEval_GetFrame");
    *(void **)&p.frame_code = dlsym(RTLD_DEFAULT, "PyFrame_GetCode");
    *(void **)&p.frame_back = dlsym(RTLD_DEFAULT, "PyFrame_GetBack");
    *(void **)&p.frame_line = dlsym(RTLD_DEFAULT, "PyFrame_GetLineNumber");
    *(void **)&p.getattr = dlsym(RTLD_DEFAULT, "PyObject_GetAttrString");
    *(void **)&p.utf8 = dlsym(RTLD_DEFAULT, "PyUnicode_AsUTF8");
    *(void **)&p.incref = dlsym(RTLD_DEFAULT, "Py_IncRef");
    *(void **)&p.decref = dlsym(RTLD_DEFAULT, "Py_DecRef");
    *(void **)&p.err_clear = dlsym(RTLD_DEFAULT, "PyErr_Clear");
    int ok = p.gil_check && p.get_frame && p.frame_code && p.frame_back && p.frame_line && p.getattr &&
             p.utf8 && p.incref && p.decref && p.err_clear;
    if (ok) py = p;
    py_ready = ok ? 1 : -1;
  }
  int rc = py_ready == 1 ? 0 : GA_DEV_ENOTSUP;
  pthread_mutex_unlock(&py_mu);
  return rc;
}

/* ---- Interned code objects ---- */

typedef struct code_entry {
  void *code;
  char *file, *name;
} code_entry;

static code_entry *codes; /* by index */
static size_t ncodes, capcodes;
static size_t *slots; /* open addressing: index + 1, 0 = empty */
static size_t nslots;

static size_t slot_of(void *code) {
  uintptr_t k = (uintptr_t)code;
  k ^= k >> 29;
  k *= 0x9e3779b97f4a7c15ULL;
  return (size_t)(k >> 20) & (nslots - 1);
}

static char *attr_text(void *obj, const char *attr) {
  void *v = py.getattr(obj, attr);
  const char *str = v ? py.utf8(v) : NULL;
  char *copy = ga_host_strdup(str ? str : "??");
  if (v) py.decref(v);
  if (!str) py.err_clear();
  return copy;
}

/* The index + 1 of code, interned now if new; 0 on host OOM. Caller holds
 * py_mu and the GIL. */
static size_t intern(void *code) {
  if (ncodes * 2 >= nslots) {
    size_t n = nslots ? nslots * 2 : 1024;
    size_t *grown = ga_host_calloc(n, sizeof *grown);
    if (!grown) return 0;
    free(slots);
    slots = grown;
    nslots = n;
    for (size_t i = 0; i < ncodes; i++) {
      size_t j = slot_of(codes[i].code);
      while (slots[j]) j = (j + 1) & (nslots - 1);
      slots[j] = i + 1;
    }
  }
  size_t j = slot_of(code);
  for (; slots[j]; j = (j + 1) & (nslots - 1))
    if (codes[slots[j] - 1].code == code) return slots[j];
  if (ncodes == capcodes) {
    size_t c = capcodes ? capcodes * 2 : 256;
    code_entry *v = ga_host_realloc(codes, c * sizeof *v);
    if (!v) return 0;
    codes = v;
    capcodes = c;
  }
  code_entry e = {code, attr_text(code, "co_filename"), attr_text(code, "co_name")};
  if (!e.file || !e.name) {
    free(e.file);
    free(e.name);
    return 0;
  }
  py.incref(code); /* kept for good: its address stays its own */
  codes[ncodes++] = e;
  slots[j] = ncodes;
  return ncodes;
}

static int capture_python(ga_frame *out, int max) {
  if (py_ready != 1 || !py.gil_check()) return 0;
  int n = 0, nowned = 0;
  void *f = py.get_frame(), *owned[GA_FRAMES_MAX]; /* the frames PyFrame_GetBack gave us */
  pthread_mutex_lock(&py_mu);
  for (int it = 0; f && n < max && it < GA_FRAMES_MAX; it++) {
    void *code = py.frame_code(f);
    size_t id = code ? intern(code) : 0;
    if (code) py.decref(code);
    if (id) out[n++] = (ga_frame){.where = id, .line = py.frame_line(f)};
    f = py.frame_back(f);
    if (f) owned[nowned++] = f;
  }
  pthread_mutex_unlock(&py_mu);
  while (nowned) py.decref(owned[--nowned]);
  return n;
}

/* ---- Capture and output ---- */

int ga_frames_capture(int c, int python, ga_frame *out, int max) {
  int n = 0;
  if (c) {
    void *pc[GA_FRAMES_C + 1];
    int k = backtrace(pc, GA_FRAMES_C + 1);
    for (int i = 1; i < k && n < max; i++) /* 0 is this function */
      out[n++] = (ga_frame){.where = (uintptr_t)pc[i], .line = -1};
  }
  if (python) n += capture_python(out + n, max - n);
  return n;
}

void ga_frames_json(ga_text *t, const ga_frame *f, int n) {
  ga_text_put(t, "[");
  for (int i = 0; i < n; i++) {
    const char *file = "??", *name = "??";
    char addr[32];
    int line = 0;
    if (f[i].line >= 0) {
      pthread_mutex_lock(&py_mu);
      if (f[i].where && f[i].where <= ncodes) {
        file = codes[f[i].where - 1].file;
        name = codes[f[i].where - 1].name;
      }
      pthread_mutex_unlock(&py_mu);
      line = f[i].line;
    } else {
      Dl_info info;
      if (dladdr((void *)(f[i].where - 1), &info)) { /* -1: the call, not the return address */
        if (info.dli_fname) file = info.dli_fname;
        if (info.dli_sname) name = info.dli_sname;
      }
      if (name[0] == '?' && name[1] == '?') {
        snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)f[i].where);
        name = addr;
      }
    }
    ga_text_put(t, "%s{\"filename\":", i ? "," : "");
    ga_text_json_str(t, file);
    ga_text_put(t, ",\"line\":%d,\"name\":", line);
    ga_text_json_str(t, name);
    ga_text_put(t, "}");
  }
  ga_text_put(t, "]");
}
