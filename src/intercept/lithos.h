/* lithos.h: the C API liblithos.so exports to code running inside the
 * intercepted process (the in-process scheduler, tests, tools).
 *
 * Find the functions at run time, since the library is preloaded rather than
 * linked: dlsym(RTLD_DEFAULT, "lithos_stream_set_tpcs"). All functions are
 * thread-safe, never throw and never stop the process; they return 0 (or a
 * count) on success and a negative LITHOS_E* code otherwise.
 *
 * TPC sets are bitmaps over *logical* TPCs (TPC t = SMs 2t and 2t+1 as %smid
 * numbers them): bit t of words[t / 64]. A set that contains a TPC with no
 * live mask slot on this GPU is refused (LITHOS_EINVAL): lithos never emits a
 * mask that could leave a launch with no TPC to run on. Sets are checked
 * against the configured slot map's GPU; on every other GPU a process
 * launches on, the same logical TPCs are masked with that GPU's own map.
 */
#ifndef LITHOS_H_
#define LITHOS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* CUstream in cuda.h */

#define LITHOS_OK 0
#define LITHOS_EINVAL (-1)      /* null argument, empty set, or a TPC without a live slot */
#define LITHOS_ENOSLOTMAP (-2)  /* no slot map loaded (LITHOS_SLOT_MAP; `lithos run` sets it once the GPU
                                  is calibrated: `lithos calibrate`, or a run with --tpcs) */
#define LITHOS_EUNSUPPORTED (-3) /* the backend in use cannot do it (green-context, off) */
#define LITHOS_EINTERNAL (-4)   /* lithos failed inside; nothing changed */

/* Confines the kernels launched on `stream` from now on to the TPCs in
 * words[0..1] (it overrides the process-wide set for that stream). The mask
 * is applied when a launch's descriptor is built: for kernels launched with
 * cuLaunchKernel & co. that is the launch itself; for CUDA graphs it is when
 * the graph exec's descriptors are built (docs/interposer.md).
 * Stream handles: NULL or CU_STREAM_LEGACY (0x1) name the legacy default
 * stream, CU_STREAM_PER_THREAD (0x2) the per-thread default streams of every
 * thread. The setting is forgotten when the stream is destroyed. */
int lithos_stream_set_tpcs(struct CUstream_st* stream, const uint64_t words[2]);
/* Removes the stream's own set: its launches follow the process-wide set. */
int lithos_stream_clear_tpcs(struct CUstream_st* stream);
/* Replaces the process-wide set (LITHOS_TPCS / LITHOS_TPC_SET); words ==
 * NULL means the whole GPU. */
int lithos_set_process_tpcs(const uint64_t words[2]);
/* Writes the live logical TPCs of the slot map to words[0..1]; returns how
 * many there are. */
int lithos_live_tpcs(uint64_t words[2]);
/* Writes the coverage statistics as one JSON object (NUL-terminated, cut to
 * `size`); returns the full length, like snprintf. */
int lithos_stats_json(char* buffer, size_t size);
/* Writes the report lithos writes at exit (LITHOS_STATS, LITHOS_STATS_FILE,
 * LITHOS_ATOM_REPORT) now, for a program that ends with _exit() and so
 * skips it; the exit does not write it again. Returns 0. */
int lithos_report_now(void);
/* The backend in use: "descriptor", "green-context", "none (unmasked)", ... */
const char* lithos_backend(void);
/* "lithos <version>". */
const char* lithos_version(void);
/* Switches lithos off (0) or on again (non-zero) for the whole process, as
 * LITHOS_DISABLE=1 does at start: while off, every hook only forwards to the
 * driver and no mask is written. Returns whether it was on. For operators, and
 * for measuring lithos's own cost inside one process. */
int lithos_set_enabled(int enabled);
/* Kernel atomizer (LITHOS_ATOMIZE=1): waits for the launches it timed, then
 * writes its per-kernel report (JSON: rewritten kernels, launches, atoms,
 * GPU time of timed launches) to `path`, or to LITHOS_ATOM_REPORT when path
 * is NULL. Returns 0, or LITHOS_EINVAL when there is nowhere to write. */
int lithos_atom_report(const char* path);
/* Changes the atomizer's rule for later launches: forced_atoms > 0 splits
 * every splittable launch into that many atoms (tests, cost measurements);
 * 0 returns to atoms of atom_us microseconds (atom_us <= 0 keeps the
 * current target). Returns 0, or LITHOS_EINVAL when the atomizer is off. */
int lithos_atom_configure(unsigned forced_atoms, double atom_us);

#ifdef __cplusplus
}
#endif

#endif /* LITHOS_H_ */
