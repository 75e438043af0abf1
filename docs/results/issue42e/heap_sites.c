/* Which allocations an opening connection still holds (issue 42, fifth pass): an LD_PRELOAD
 * interposer over malloc/free for a binary on the system allocator (the heap test, not the
 * broker, which links mimalloc). The first SIGUSR1 starts recording, the second writes every
 * allocation made since and still live, with 10 return addresses, to heap-live.txt and the
 * process's maps to heap-maps.txt (symbolize with addr2line -f -C -i against the binary).
 *   gcc -O2 -shared -fPIC -o heap_sites.so heap_sites.c -ldl
 *   LD_PRELOAD=./heap_sites.so <the mqtt_idle_heap test built with --release, sending itself
 *   SIGUSR1 before and after its second batch of connections>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>
#define N 2000000
#define F 10
typedef struct { void *p; size_t s; void *bt[F]; } ev;
static ev *evs; static atomic_long idx; static volatile int on;
static void *(*rmalloc)(size_t); static void (*rfree)(void*); static void *(*rrealloc)(void*,size_t);
static void *(*rcalloc)(size_t,size_t); static int (*rpm)(void**,size_t,size_t); static void *(*raa)(size_t,size_t);
static __thread int inside;
static void rec(void *p, size_t s) {
  if (!on || inside || !evs) return;
  long i = atomic_fetch_add(&idx, 1); if (i >= N) return;
  evs[i].p = p; evs[i].s = s;
  if (s) { inside = 1; void *b[F+2]; int n = backtrace(b, F+2); inside = 0; for (int k=0;k<F;k++) evs[i].bt[k] = k+2<n ? b[k+2] : 0; }
}
static void dump(void) {
  long n = idx < N ? idx : N;
  FILE *f = fopen("heap-live.txt", "w");
  for (long i = 0; i < n; i++) {
    if (!evs[i].s) continue;
    int dead = 0;
    for (long j = i+1; j < n; j++) if (evs[j].p == evs[i].p) { dead = 1; break; }
    if (dead) continue;
    fprintf(f, "%zu", evs[i].s);
    for (int k=0;k<F;k++) fprintf(f, " %p", evs[i].bt[k]);
    fprintf(f, "\n");
  }
  fclose(f);
  FILE *m = fopen("/proc/self/maps","r"); FILE *o = fopen("heap-maps.txt","w"); char buf[4096]; size_t k; while ((k = fread(buf,1,sizeof buf,m)) > 0) fwrite(buf,1,k,o); fclose(m); fclose(o);
}
static void onsig(int s) { (void)s; if (!on) { on = 1; } else { on = 0; dump(); } }
__attribute__((constructor)) static void init(void) {
  rmalloc = dlsym(RTLD_NEXT, "malloc"); rfree = dlsym(RTLD_NEXT, "free"); rrealloc = dlsym(RTLD_NEXT, "realloc");
  rcalloc = dlsym(RTLD_NEXT, "calloc"); rpm = dlsym(RTLD_NEXT, "posix_memalign"); raa = dlsym(RTLD_NEXT, "aligned_alloc");
  evs = rcalloc(N, sizeof(ev)); void *b[4]; inside = 1; backtrace(b, 4); inside = 0;
  signal(SIGUSR1, onsig);
}
void *malloc(size_t s) { void *p = rmalloc(s); rec(p, s); return p; }
void free(void *p) { if (p) rec(p, 0); rfree(p); }
void *realloc(void *o, size_t s) { if (o) rec(o, 0); void *p = rrealloc(o, s); rec(p, s); return p; }
void *calloc(size_t a, size_t b) { if (!rcalloc) return 0; void *p = rcalloc(a, b); rec(p, a*b); return p; }
int posix_memalign(void **r, size_t a, size_t s) { int e = rpm(r, a, s); if (!e) rec(*r, s); return e; }
void *aligned_alloc(size_t a, size_t s) { void *p = raa(a, s); rec(p, s); return p; }
