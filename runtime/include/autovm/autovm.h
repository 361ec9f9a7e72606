/* libautovm: executes an AutoVM plan (schemas/plan.schema.json) inside a trainer.
 *
 * Contract. A plan, written ahead of time by autovm-plan, gives every tensor of one training step
 * an offset in one arena, lists the steps in order, and schedules actions (evict, prefetch,
 * discard, recompute, read_remote, advise) around the steps. The runtime applies those actions at the step
 * boundaries the trainer reports, following docs/execution-model.md (execution model autovm-1):
 *
 *   trainer:   step_begin(0) run 0 step_end(0)  step_begin(1) run 1 step_end(1) ...  step_end(n-1)
 *   runtime:   |issue after_step -1            |issue after_step 0                  |issue n-1
 *              |complete ready_before_step 0   |complete ready_before_step 1        |complete n
 *
 *   evict a     issued at step_end(after_step) ...... complete at step_begin(ready_before_step)
 *   residency   resident ########################### off from ready_before_step
 *   prefetch a  issued at step_end(after_step) ...... complete at step_begin(ready_before_step)
 *   residency   off ... | resident from after_step + 1 (memory back; data ready at completion)
 *   discard a   at step_end(after_step): off from after_step + 1
 *   recompute a at step_begin(ready_before_step): resident from ready_before_step; after
 *               step_begin returns, the trainer runs step source_step again, then the step itself.
 *   read_remote a at step_begin(ready_before_step): a stays off (ON_HOST, not counted); step
 *               ready_before_step reads it where its evicted copy lies in host memory, mapped
 *               into the device's address space (autovm_tensor_pointer says where).
 *
 * Steps come in order 0..n-1; after step_end(n-1) the next training step starts again at 0.
 * Tensors are allocated at step_begin(first) and freed after step_end(last) of their lifetime;
 * parameters, buffers and optimizer state persist across training steps.
 *
 * Errors. Every function returns an autovm_status and never throws or aborts on bad input; after
 * a status other than AUTOVM_OK, autovm_last_error() gives a message (per thread) that names the
 * thing at fault and what to do. Outputs are written only on AUTOVM_OK.
 *
 * Threads. A plan may be shared by threads once loaded; a runtime is used by one thread at a time.
 */
#ifndef AUTOVM_AUTOVM_H
#define AUTOVM_AUTOVM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define AUTOVM_EXPORT __declspec(dllexport)
#else
#define AUTOVM_EXPORT __attribute__((visibility("default")))
#endif

/* The version of this header's API. autovm_version() returns the library's; they must match. */
#define AUTOVM_API_VERSION 7

typedef enum autovm_status {
  AUTOVM_OK = 0,
  AUTOVM_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, an id or step out of range */
  AUTOVM_ERR_IO = 2,               /* the plan file could not be read (or is a directory, FIFO, device) */
  AUTOVM_ERR_PLAN = 3,             /* the plan is malformed or inconsistent */
  AUTOVM_ERR_NOT_RESIDENT = 4,     /* strict mode: a step used a tensor that is not resident */
  AUTOVM_ERR_OUT_OF_MEMORY = 5,    /* memory could not be allocated, or strict mode: a step's
                                      resident bytes exceed the budget */
  AUTOVM_ERR_BACKEND = 6,          /* the backend failed, or is not available in this build */
  AUTOVM_ERR_STATE = 7             /* a call out of order (steps not 0..n-1, touch outside a step) */
} autovm_status;

typedef enum autovm_backend {
  AUTOVM_BACKEND_HOST = 0, /* the arena in host memory; transfers are memcpy (testing, CI) */
  AUTOVM_BACKEND_CUDA = 1  /* the arena on a CUDA device; the mechanism says which memory */
} autovm_backend;

/* How the CUDA backend moves a tensor (runtime/README.md has the measurements behind them). */
typedef enum autovm_mechanism {
  AUTOVM_MECHANISM_PLAN = 0,     /* the plan's options.mechanism ("prefetch", "staged" or
                                    "mapped"; any other name: staged) */
  AUTOVM_MECHANISM_PREFETCH = 1, /* managed arena; cudaMemPrefetchAsync to the host and back */
  AUTOVM_MECHANISM_STAGED = 2,   /* managed arena; the copy engine through pinned host buffers,
                                    cudaMemDiscardBatchAsync / DiscardAndPrefetchBatchAsync so
                                    the driver never copies stale pages */
  AUTOVM_MECHANISM_MAPPED = 3    /* device memory from the virtual memory management API
                                    (cuMemCreate/cuMemMap) at one stable address; the copy
                                    engine through pinned host buffers, both directions at once */
} autovm_mechanism;

/* What the runtime does with the plan's actions. */
typedef enum autovm_mode {
  AUTOVM_MODE_PLAN = 0,          /* evict, prefetch, discard and recompute as planned */
  AUTOVM_MODE_DEMAND_PAGING = 1, /* the plan's evictions (to the host through the driver), no
                                    prefetches: pages fault back when a step touches them
                                    (the baseline that shows what planning buys; managed only) */
  AUTOVM_MODE_RESIDENT = 2       /* no actions: every tensor stays on the device (no budget) */
} autovm_mode;

/* Where tensors lie in the arena. The plan lays them out by lifetime: a tensor keeps its range
 * while it is evicted, so the arena is the step's peak without swapping. Where the backend keeps
 * an evicted tensor's bytes in host buffers of its own (the host backend, and the CUDA backend's
 * mapped mechanism in mode PLAN), the runtime can pack the arena by residency instead: ranges
 * are shared by tensors never on the device at the same step, the arena needs about the budget,
 * and each tensor still keeps one address (runtime/src/residency_layout.h). */
typedef enum autovm_layout {
  AUTOVM_LAYOUT_AUTO = 0,     /* packed where the backend can, else the plan's */
  AUTOVM_LAYOUT_PLAN = 1,     /* the plan's offsets (arena = statistics.arena_bytes) */
  AUTOVM_LAYOUT_PACKED = 2    /* packed; AUTOVM_ERR_INVALID_ARGUMENT where the backend cannot */
} autovm_layout;

/* Whose memory the tensors lie in. */
typedef enum autovm_memory {
  AUTOVM_MEMORY_RUNTIME = 0, /* the backend allocates the arena; a tensor lies at its offset
                                unless the trainer binds its own range (autovm_tensor_bind) */
  AUTOVM_MEMORY_TRAINER = 1  /* no arena: the trainer owns every tensor's memory (PyTorch's
                                tensors on autovm's pool, say) and binds each tensor the plan
                                moves, again whenever its address changes. An action due on a
                                tensor that is not bound is skipped and counted
                                (autovm_stats.unbound_actions): it never touches memory, and the
                                tensor counts resident until the plan has it back. A
                                non-persistent tensor's binding ends with its lifetime
                                (step_end of its last step): bind it again in the next training
                                step. CUDA backend, two mechanisms:
                                prefetch (mode PLAN or DEMAND_PAGING) on managed memory:
                                migration never changes a byte, so a range the trainer freed
                                and reused before the plan expected is moved, never
                                overwritten; mapped (mode PLAN) on a vmm pool
                                (autovm_runtime_options.pool): the copy engine takes an
                                evicted tensor's bytes to pinned host memory and the pool
                                unmaps the chunks wholly inside it, so its pages really go and
                                its address stays; a prefetch maps them and copies the bytes
                                back, unless the trainer freed the allocation in the meantime
                                (the pool's serials tell), and a free while copies are queued
                                makes the freeing stream wait for them. A remote read maps the
                                runtime's host memory holding the tensor at its paged-out
                                chunks for the step (the prefetch mechanism: the range is
                                advised to stay on the host), so kernels read it at its own
                                address; a binding that ends then leaves that memory in the
                                range, its bytes readable, until the trainer frees it or the
                                runtime needs the memory again. The host backend
                                leaves the trainer's bytes alone (it only counts). layout
                                must be AUTO or PLAN; autovm_tensor_pointer is NULL for
                                unbound tensors */
} autovm_memory;

typedef enum autovm_tensor_kind {
  AUTOVM_TENSOR_INPUT = 0,
  AUTOVM_TENSOR_LABEL = 1,
  AUTOVM_TENSOR_PARAMETER = 2,
  AUTOVM_TENSOR_BUFFER = 3,
  AUTOVM_TENSOR_GRADIENT = 4,
  AUTOVM_TENSOR_OPTIMIZER_STATE = 5,
  AUTOVM_TENSOR_ACTIVATION = 6,
  AUTOVM_TENSOR_ACTIVATION_GRAD = 7,
  AUTOVM_TENSOR_WORKSPACE = 8
} autovm_tensor_kind;

typedef enum autovm_action_kind {
  AUTOVM_ACTION_EVICT = 0,
  AUTOVM_ACTION_PREFETCH = 1,
  AUTOVM_ACTION_DISCARD = 2,
  AUTOVM_ACTION_RECOMPUTE = 3,
  AUTOVM_ACTION_ADVISE = 4,
  /* Step ready_before_step (= after_step + 1) reads the tensor where its evicted copy lies in
   * host memory, over the link, instead of bringing it back (docs/execution-model.md, "Remote
   * reads"): the tensor is off there by an evict (ON_HOST) and counts nothing, the step only
   * reads it. The loader refuses one whose tensor is not off by an evict at that step, or
   * that the step does not read. */
  AUTOVM_ACTION_READ_REMOTE = 5
} autovm_action_kind;

/* Where a tensor's bytes are now. Resident (counted against the budget): RESIDENT, EVICTING,
 * PREFETCHING. A step may use a tensor only while it is RESIDENT. */
typedef enum autovm_residency {
  AUTOVM_RESIDENCY_UNALLOCATED = 0, /* outside its lifetime */
  AUTOVM_RESIDENCY_RESIDENT = 1,
  AUTOVM_RESIDENCY_EVICTING = 2,    /* copy to host issued, not complete: still resident */
  AUTOVM_RESIDENCY_ON_HOST = 3,     /* evicted: the bytes are in host memory only */
  AUTOVM_RESIDENCY_PREFETCHING = 4, /* memory back, copy from host not complete */
  AUTOVM_RESIDENCY_DISCARDED = 5    /* dropped without a copy: to be recomputed, or dead */
} autovm_residency;

typedef struct autovm_plan autovm_plan;
typedef struct autovm_runtime autovm_runtime;

/* Strings and arrays point into the plan and live as long as it does. */
typedef struct autovm_tensor_info {
  int32_t id;
  const char* name;
  autovm_tensor_kind kind;
  const char* dtype;   /* "float32", ... */
  int64_t bytes;
  int64_t offset;      /* in the arena */
  int64_t first_step;  /* lifetime [first_step, last_step], inclusive */
  int64_t last_step;
  int persistent;      /* 1: lives across training steps (parameters, buffers, optimizer state) */
} autovm_tensor_info;

typedef struct autovm_step_info {
  int64_t id;
  const char* op;
  const char* phase;   /* "forward", "loss", "backward", "optimizer" */
  const char* node;
  const int32_t* inputs;
  size_t input_count;
  const int32_t* outputs;
  size_t output_count;
  int32_t workspace;   /* -1: none */
  double compute_us;   /* the plan's predicted compute time of the step (0: not given) */
} autovm_step_info;

typedef struct autovm_action_info {
  autovm_action_kind kind;
  int32_t tensor;
  int64_t bytes;
  int64_t after_step;        /* -1: at the start of the training step */
  int64_t ready_before_step; /* the step count: by the end of the training step */
  int64_t source_step;       /* recompute: the step to run again; otherwise -1 */
  const char* advice;        /* advise: the advice; otherwise "" */
} autovm_action_info;

/* --- Version and errors ------------------------------------------------------------------- */

AUTOVM_EXPORT int autovm_version(void); /* AUTOVM_API_VERSION of the library */
/* The message of the last failure on this thread ("" when none); valid until the next call. */
AUTOVM_EXPORT const char* autovm_last_error(void);

/* --- Plans -------------------------------------------------------------------------------- */

AUTOVM_EXPORT autovm_status autovm_plan_load(const char* path, autovm_plan** out);
AUTOVM_EXPORT autovm_status autovm_plan_load_from_memory(const void* data, size_t size,
                                                         autovm_plan** out);
AUTOVM_EXPORT void autovm_plan_free(autovm_plan* plan); /* NULL is fine */

AUTOVM_EXPORT autovm_status autovm_plan_tensor_count(const autovm_plan* plan, int32_t* out);
AUTOVM_EXPORT autovm_status autovm_plan_step_count(const autovm_plan* plan, int64_t* out);
AUTOVM_EXPORT autovm_status autovm_plan_action_count(const autovm_plan* plan, int64_t* out);
AUTOVM_EXPORT autovm_status autovm_plan_arena_bytes(const autovm_plan* plan, int64_t* out);
AUTOVM_EXPORT autovm_status autovm_plan_budget_bytes(const autovm_plan* plan, int64_t* out);
/* By tensor name or by one of its aliases. */
AUTOVM_EXPORT autovm_status autovm_plan_tensor_by_name(const autovm_plan* plan, const char* name,
                                                       int32_t* id);
AUTOVM_EXPORT autovm_status autovm_plan_tensor_info(const autovm_plan* plan, int32_t id,
                                                    autovm_tensor_info* out);
AUTOVM_EXPORT autovm_status autovm_plan_step_info(const autovm_plan* plan, int64_t step,
                                                  autovm_step_info* out);
AUTOVM_EXPORT autovm_status autovm_plan_action_info(const autovm_plan* plan, int64_t index,
                                                    autovm_action_info* out);

/* --- Runtimes ----------------------------------------------------------------------------- */

typedef struct autovm_runtime_options {
  autovm_backend backend;     /* AUTOVM_BACKEND_HOST */
  int64_t budget_bytes;       /* > 0: replaces the plan's options.budget_bytes */
  int strict;                 /* 1: a use of a non-resident tensor, or a step over the budget,
                                 is an error; 0: it is counted in autovm_stats.violations only */
  int64_t host_arena_cap_bytes; /* host backend: largest arena given real memory (0: 1 GiB);
                                   a larger one runs in accounting-only mode (no memory,
                                   pointers NULL, residency still checked) */
  /* CUDA backend (ignored by the host backend): */
  autovm_mechanism mechanism;   /* AUTOVM_MECHANISM_PLAN */
  autovm_mode mode;             /* AUTOVM_MODE_PLAN */
  int device;                   /* the CUDA device (0) */
  int64_t free_margin_bytes;    /* device memory left free beyond the arena (0: 1 GiB) */
  int allow_oversubscribe;      /* 1: allow a managed arena larger than the device's free
                                   memory less the margin. On a shared GPU this can hang the
                                   device for everyone: only for a GPU that is yours alone */
  autovm_layout layout;         /* AUTOVM_LAYOUT_AUTO */
  autovm_memory memory;         /* AUTOVM_MEMORY_RUNTIME */
  struct autovm_pool* pool;     /* AUTOVM_MEMORY_TRAINER with the mapped mechanism: the vmm
                                   pool the trainer's tensors lie in (NULL: the torch pool,
                                   autovm_torch_pool) */
} autovm_runtime_options;

/* Defaults: host backend, the plan's budget, not strict, a 1 GiB cap; for CUDA: the plan's
 * mechanism, mode PLAN, device 0, a 1 GiB margin, no oversubscription; layout AUTO; the
 * runtime's memory. */
AUTOVM_EXPORT autovm_status autovm_runtime_options_init(autovm_runtime_options* options);
/* options may be NULL (the defaults). The runtime keeps what it needs of the plan: the plan
 * may be freed first. Persistent tensors start resident, with zeroed bytes. */
AUTOVM_EXPORT autovm_status autovm_runtime_create(const autovm_plan* plan,
                                                  const autovm_runtime_options* options,
                                                  autovm_runtime** out);
AUTOVM_EXPORT void autovm_runtime_free(autovm_runtime* rt); /* NULL is fine */

/* Whether this library was built with the CUDA backend (1) or not (0). */
AUTOVM_EXPORT int autovm_cuda_built(void);

/* stream: the trainer's compute stream (cudaStream_t; NULL: the legacy default stream) for the
 * CUDA backend; ignored by the host backend. The CUDA backend never waits on the host (except
 * the mapped mechanism on trainer memory, whose step_begin waits for the copies out it completes
 * before their pages are unmapped, and which waits for the step that read a tensor remotely
 * before that tensor's host mapping goes): evictions start on the runtime's copy streams once the
 * compute stream has passed the step (an event), and the compute stream waits
 * (cudaStreamWaitEvent) only before a step that needs a prefetch complete. step_begin completes everything due before the step (ready_before_step == step),
 * makes the tensors the step reads remotely readable from host memory, and
 * allocates the tensors whose lifetime starts there; the budget holds in both of the step's
 * moments (docs/execution-model.md): before it, with the chain temporaries and without what the
 * step allocates as it starts, and during it, without the temporaries (their pointers serve the
 * trainer's recompute; the step's own outputs may reuse their bytes); at step 0 it also issues
 * the actions with after_step -1. step_end issues the actions with after_step == step and frees the tensors
 * whose lifetime ends there; at the last step it completes the actions due by the end.
 * In strict mode step_begin returns AUTOVM_ERR_OUT_OF_MEMORY when the step's resident bytes
 * exceed the budget; the step has begun all the same. */
AUTOVM_EXPORT autovm_status autovm_step_begin(autovm_runtime* rt, int64_t step, void* stream);
AUTOVM_EXPORT autovm_status autovm_step_end(autovm_runtime* rt, int64_t step, void* stream);

/* Where tensor id lies: its place in the arena, fixed for the runtime's life, its contents valid
 * while the tensor is resident; except while it is a chain temporary (recomputed after its
 * lifetime, in the moment before one step: docs/execution-model.md), when it lies in room after the arena: ask
 * again after step_begin for tensors a recompute brings back. During a step that reads the
 * tensor remotely (AUTOVM_ACTION_READ_REMOTE) its contents are valid there too, read from host
 * memory: at its own place (the host backend, the managed mechanisms, trainer memory), or, on
 * the mapped mechanism's arena, where its evicted copy lies in host memory mapped into the
 * device's address space (the arena's range is another tensor's then): ask again after
 * step_begin. NULL (with AUTOVM_OK) in accounting-only mode. */
AUTOVM_EXPORT autovm_status autovm_tensor_pointer(autovm_runtime* rt, int32_t id, void** ptr);
/* Binds the trainer's own memory to tensor id: from now on the runtime moves [ptr, ptr + bytes)
 * for it instead of its arena range (bytes must be the tensor's; ptr NULL: back to the arena,
 * or unbound with AUTOVM_MEMORY_TRAINER). The contents are not copied. CUDA backend: managed
 * memory (cudaMallocManaged) for the prefetch and staged mechanisms, managed or device memory
 * for mapped; anything else is AUTOVM_ERR_INVALID_ARGUMENT. Allowed while the tensor's bytes
 * are where the trainer left them: it is resident, outside its lifetime, or off the device only
 * in the plan's count because its action was skipped unbound; between steps or during one (a
 * trainer binds a step's output while the step runs). AUTOVM_ERR_STATE otherwise (evicted,
 * being moved, discarded). */
AUTOVM_EXPORT autovm_status autovm_tensor_bind(autovm_runtime* rt, int32_t id, void* ptr,
                                               int64_t bytes);
AUTOVM_EXPORT autovm_status autovm_tensor_residency(const autovm_runtime* rt, int32_t id,
                                                    autovm_residency* out);
/* The trainer is about to read tensor id on `stream` (its compute stream), wherever the plan
 * has it: a bound tensor the backend has taken off the device (mapped mechanism with trainer
 * memory) is brought back now and `stream` waits for it, so a plan that is wrong or late costs
 * time, never a read of unmapped or stale memory. Counted in autovm_stats.late_requires when it
 * had to act. A no-op where the backend's moves leave the bytes addressable (migration, the
 * host backend) or the tensor is resident. */
AUTOVM_EXPORT autovm_status autovm_tensor_require(autovm_runtime* rt, int32_t id, void* stream);
/* Brings back every bound tensor the backend has off the device (mapped mechanism with trainer
 * memory), `stream` waiting for them: call it before the trainer reads its tensors outside the
 * training step (a plan may end a step with parameters on the host), e.g. when it stops
 * training under the plan. The plan's count is unchanged: the next training step's prefetches
 * find the bytes in place. Freeing the runtime does the same, synchronously. */
AUTOVM_EXPORT autovm_status autovm_runtime_restore(autovm_runtime* rt, void* stream);
/* Declares that the running step (between step_begin and step_end of `step`) uses tensor id.
 * A tensor that is not RESIDENT is a violation: AUTOVM_ERR_NOT_RESIDENT in strict mode,
 * otherwise counted and AUTOVM_OK. AUTOVM_ERR_STATE when `step` is not the running step. */
AUTOVM_EXPORT autovm_status autovm_touch(autovm_runtime* rt, int64_t step, int32_t id);

typedef struct autovm_stats {
  int64_t bytes_to_host;         /* SUM: bytes of the evicts issued */
  int64_t bytes_to_device;       /* SUM: bytes of the prefetches issued */
  int64_t evictions;             /* COUNT: evicts issued */
  int64_t prefetches;            /* COUNT: prefetches issued */
  int64_t discards;              /* COUNT: discards */
  int64_t recomputes;            /* COUNT: recomputes (tensors marked resident) */
  int64_t advises;               /* COUNT: advise actions seen */
  int64_t resident_bytes;        /* bytes resident now (tensors whose evict or discard was
                                    skipped unbound count: their bytes stayed) */
  int64_t peak_resident_bytes;   /* most bytes resident during a step */
  int64_t violations;            /* COUNT: non-resident uses and steps over the budget */
  int64_t training_steps;        /* COUNT: training steps completed (step_end of the last step) */
  int64_t initial_offload_bytes; /* SUM: persistent tensors the plan keeps on the host between
                                    training steps, moved there at the first step_begin(0) (not
                                    part of bytes_to_host) */
  int accounting_only;           /* 1: no arena memory (pointers are NULL) */
  /* CUDA backend, measured with events on the compute stream (0 for the host backend); they
   * cover steps whose events have completed, read when the stats are asked for: */
  double stall_us;               /* SUM: time the compute stream waited for transfers: prefetches
                                    due, and evictions whose memory the step counts free */
  int64_t late_prefetches;       /* COUNT: steps whose waits held the compute stream > 5 us */
  int64_t measured_waits;        /* COUNT: steps that waited (all their waits timed as one) */
  int64_t memory_bytes;          /* the backend's memory: the arena as laid out (autovm_layout)
                                    and the room for chain temporaries (0: trainer memory) */
  int64_t unbound_actions;       /* COUNT: evicts, prefetches, discards and initial offloads
                                    skipped because their tensor was not bound (trainer memory) */
  int64_t unbound_bytes;         /* SUM: their bytes */
  int64_t late_requires;         /* COUNT: autovm_tensor_require calls that brought a tensor
                                    back (or waited for its copy) */
  int64_t stale_prefetches;      /* COUNT: prefetches and requires skipped because the trainer
                                    had freed the tensor's allocation (mapped, trainer memory) */
  int64_t remote_reads;          /* COUNT: read_remote actions met at their steps (mode PLAN
                                    and DEMAND_PAGING; under demand paging the pages fault back
                                    instead, and a tensor whose evict was skipped is read where
                                    it stayed) */
  int64_t remote_read_bytes;     /* SUM: their bytes (not part of bytes_to_device) */
  /* Host time, wall clock, in microseconds (SUM): */
  double host_us;                /* in autovm_step_begin and autovm_step_end, all of it */
  double host_wait_us;           /* blocked on the device (mapped mechanism with trainer memory:
                                    copies out waited for before their pages go, in a boundary
                                    or in a pool allocation that reclaims; a remote read's step
                                    waited for before its host memory goes) */
  double paging_us;              /* mapping and unmapping the pool's chunks for page-outs and
                                    page-ins (same mechanism) */
} autovm_stats;

/* Synchronises with the device (CUDA backend) to read the event timings: not for the hot path. */
AUTOVM_EXPORT autovm_status autovm_runtime_stats(const autovm_runtime* rt, autovm_stats* out);
/* Zeroes the counters and sums (resident bytes and residency stay), e.g. after a warm-up. */
AUTOVM_EXPORT autovm_status autovm_runtime_stats_reset(autovm_runtime* rt);
/* The stall measured before step `step`, summed over the training steps since the last reset
 * (synchronises, like autovm_runtime_stats). */
AUTOVM_EXPORT autovm_status autovm_step_stall_us(const autovm_runtime* rt, int64_t step,
                                                 double* out);

/* --- Memory pools: the trainer's own tensors on memory the runtime owns ------------------
 *
 * Contract. A pool sub-allocates one device's memory, got in bulk, to many allocations (no
 * cudaMallocManaged or cudaFree per allocation), and orders reuse by stream: a block freed on
 * stream A is reusable at once by A; another stream B that takes it is first made to wait, on
 * the device, for everything enqueued on A so far (an event recorded on A, cudaStreamWaitEvent
 * on B). The host never waits, except in autovm_pool_trim, autovm_pool_free, and a vmm
 * allocation that fits only once unused chunks whose frees the device has not yet passed are
 * given back (these synchronise the device first, so no queued kernel can touch what is
 * released). Streams passed in must outlive the blocks freed
 * on them (or a trim). Sizes are rounded up to 512 bytes; a 0-byte allocation is NULL.
 *
 *   managed  one cudaMallocManaged range of the capacity, advised preferred-location and
 *            accessed-by the device; each 2 MiB chunk is prefetched to the device on the
 *            allocating stream when an allocation first reaches it, and stays there until the
 *            pool is freed (managed pages go back to the device only with the range).
 *   vmm      one reserved address range of twice the capacity plus the device's memory
 *            (cuMemAddressReserve: addresses for what a runtime pages out too); device
 *            memory is created and mapped into it in chunks of the allocation granularity
 *            (2 MiB on an H200; chunk_bytes) as allocations reach them, and stays mapped when
 *            they are freed, until a trim unmaps and releases every chunk no allocation uses
 *            (the physical pages really go back: cudaMemGetInfo rises), or until an allocation
 *            needs more than the capacity: then the unused chunks whose frees the device has
 *            passed are unmapped first (an event recorded at each free: no wait), and only if
 *            that is not enough does the pool synchronise and unmap every unused chunk. A
 *            chunk unmapped there, or paged out by a runtime, stays the pool's as a spare:
 *            the next chunk to be mapped takes it before any new device memory (a map, not
 *            a create and a release), and a trim or a lower limit gives it back. An
 *            allocation of a chunk or more starts on a chunk boundary and owns whole chunks;
 *            smaller ones are carved from an address range of their own, so that they pack
 *            into few chunks instead of each keeping one of the large allocations' chunks
 *            mapped. A limit (autovm_pool_set_limit) lowers the capacity for a while: a
 *            runtime holding a budget sets it to the budget.
 *
 * Safety. The capacity (device memory the pool may hold: populated or mapped chunks) is
 * refused at creation when it is larger than the device's free memory less free_margin_bytes,
 * and managed chunks are not populated when the device has less than that free then, unless
 * allow_oversubscribe is set (managed memory only; on a shared GPU oversubscribed managed
 * memory can hang the device for everyone). A failed allocation is AUTOVM_ERR_OUT_OF_MEMORY,
 * and its message gives the request, the bytes in use and held, and the capacity.
 *
 * Threads. A pool may be used by several threads at once. */
typedef enum autovm_pool_memory {
  AUTOVM_POOL_MANAGED = 0,
  AUTOVM_POOL_VMM = 1
} autovm_pool_memory;

typedef struct autovm_pool autovm_pool;

typedef struct autovm_pool_options {
  autovm_pool_memory memory;  /* AUTOVM_POOL_MANAGED */
  int device;                 /* the CUDA device (0) */
  int64_t capacity_bytes;     /* most device memory the pool holds (0: the device's free
                                 memory at creation less the margin) */
  int64_t free_margin_bytes;  /* device memory left free (0: 1 GiB) */
  int allow_oversubscribe;    /* managed only: 1 allows a capacity beyond the free memory.
                                 Only for a GPU that is yours alone */
  int64_t chunk_bytes;        /* vmm only: the unit of memory mapped, rounded up to the
                                 allocation granularity (0: the granularity, 2 MiB on an
                                 H200). Larger chunks page a runtime's evictions in fewer
                                 driver calls (runtime/README.md) */
} autovm_pool_options;

typedef struct autovm_pool_stats {
  int64_t allocated_bytes;      /* SUM: bytes asked for by the live allocations */
  int64_t peak_allocated_bytes; /* most allocated_bytes since creation or the last reset */
  int64_t resident_bytes;       /* device memory the pool holds now (populated or mapped
                                   chunks, and vmm spares: unmapped chunks kept for reuse) */
  int64_t peak_resident_bytes;  /* most resident_bytes since creation or the last reset */
  int64_t capacity_bytes;       /* the most resident_bytes may reach */
  int64_t allocations;          /* COUNT: live allocations */
  int64_t alloc_calls;          /* COUNT: allocations asked for, 0 bytes included */
  int64_t free_calls;           /* COUNT: frees */
  int64_t cross_stream_waits;   /* COUNT: allocations ordered after another stream's frees */
  int64_t failed_allocations;   /* COUNT: allocations refused */
  int64_t last_failed_bytes;    /* the bytes the last refused allocation asked for (0: none) */
  int64_t released_bytes;       /* SUM: device memory given back by trims and lower limits */
  int64_t paged_out_bytes;      /* SUM: vmm chunks a runtime unmapped under an evicted tensor */
  int64_t paged_in_bytes;       /* SUM: vmm chunks mapped again to bring one back */
  int64_t limit_bytes;          /* the most resident_bytes may reach now: capacity_bytes, or
                                   the limit set (autovm_pool_set_limit) */
  int64_t small_chunk_bytes;    /* vmm: mapped chunks that allocations under a chunk use (the
                                   rest of resident_bytes: whole-chunk allocations, and the
                                   unused chunks) */
  int64_t unused_chunk_bytes;   /* vmm: mapped chunks no allocation uses, and the spares (given
                                   back by a trim; reused when an allocation needs them) */
  int64_t in_use_bytes;         /* resident_bytes less unused_chunk_bytes: what the pool cannot
                                   give back now (managed: resident_bytes) */
  int64_t peak_in_use_bytes;    /* most in_use_bytes since creation or the last reset: what a
                                   limit has to allow for the same allocations to fit */
  int64_t pressure_waits;       /* vmm: COUNT: times the host waited for the device to pass a
                                   free before its chunks could go, for an allocation or a
                                   page-in that the limit refused otherwise */
  int64_t pressure_wait_us;     /* vmm: SUM: the host's time in those waits, microseconds */
} autovm_pool_stats;

/* Defaults: managed, device 0, capacity from the free memory, a 1 GiB margin. */
AUTOVM_EXPORT autovm_status autovm_pool_options_init(autovm_pool_options* options);
/* options may be NULL (the defaults). Reserves the address range (no memory behind it yet). */
AUTOVM_EXPORT autovm_status autovm_pool_create(const autovm_pool_options* options,
                                               autovm_pool** out);
/* Synchronises the device and releases all the pool's memory: live allocations dangle. */
AUTOVM_EXPORT void autovm_pool_free(autovm_pool* pool); /* NULL is fine */
/* `bytes` >= 0 used from `stream` (cudaStream_t; NULL: the legacy default stream). */
AUTOVM_EXPORT autovm_status autovm_pool_alloc(autovm_pool* pool, int64_t bytes, void* stream,
                                              void** out);
/* Frees an allocation (NULL is fine); `stream` is the one whose work last used it (PyTorch
 * passes the allocation's stream). */
AUTOVM_EXPORT autovm_status autovm_pool_dealloc(autovm_pool* pool, void* ptr, void* stream);
/* The live allocation that `address` lies in: [*base, *base + *bytes), bytes as asked for;
 * *base NULL and *bytes 0 (AUTOVM_OK) when it lies in none. */
AUTOVM_EXPORT autovm_status autovm_pool_find(const autovm_pool* pool, const void* address,
                                             void** base, int64_t* bytes);
AUTOVM_EXPORT autovm_status autovm_pool_stats_get(const autovm_pool* pool,
                                                  autovm_pool_stats* out);
/* The peaks start again from the current figures. */
AUTOVM_EXPORT autovm_status autovm_pool_reset_peaks(autovm_pool* pool);
/* Synchronises the device, then gives back the vmm chunks no allocation uses, spares included
 * (managed pools give nothing back); every free block is then reusable by any stream without
 * a wait. */
AUTOVM_EXPORT autovm_status autovm_pool_trim(autovm_pool* pool);
/* vmm pools: the most device memory the pool may hold from now on, `bytes` in (0, capacity]
 * (0: the capacity again). Unused chunks and spares beyond it are given back at once
 * (synchronising the device if need be); live allocations stay, and allocations that would
 * pass the limit fail as they would at the capacity. A runtime's page-in is not refused (the tensor is the
 * trainer's). AUTOVM_ERR_INVALID_ARGUMENT for a managed pool, whose pages go back only with
 * the pool, and for bytes outside that range. */
AUTOVM_EXPORT autovm_status autovm_pool_set_limit(autovm_pool* pool, int64_t bytes);

/* --- PyTorch's allocator hooks ------------------------------------------------------------
 * The process's torch pool, behind torch.cuda.memory.CUDAPluggableAllocator (python/autovm/
 * allocator.py installs it). autovm_torch_configure sets its options before its first use;
 * otherwise it is created on first use from the environment: AUTOVM_POOL_MEMORY (managed or
 * vmm), AUTOVM_POOL_CAPACITY (bytes), AUTOVM_POOL_CHUNK (bytes, vmm),
 * AUTOVM_POOL_ALLOW_OVERSUBSCRIBE (1). */
AUTOVM_EXPORT autovm_status autovm_torch_configure(const autovm_pool_options* options);
/* The torch pool, created if need be (AUTOVM_ERR_STATE after a failed creation). */
AUTOVM_EXPORT autovm_status autovm_torch_pool(autovm_pool** out);
/* The hooks, with the signatures CUDAPluggableAllocator calls (stream: a cudaStream_t).
 * autovm_torch_alloc is not a C API function: it is called by PyTorch's C++ only, and throws
 * std::runtime_error (its message beginning "autovm_torch_alloc: out of memory" with the
 * pool's figures) when it cannot allocate, which PyTorch raises in Python as a RuntimeError
 * (a NULL result would become a tensor at address 0). autovm_torch_segment_alloc returns NULL
 * instead, for a torch.cuda.MemPool, whose caching allocator raises its own out-of-memory
 * error on NULL. autovm_torch_free never throws; an error there is kept for
 * autovm_last_error. */
AUTOVM_EXPORT void* autovm_torch_alloc(size_t size, int device, void* stream);
AUTOVM_EXPORT void* autovm_torch_segment_alloc(size_t size, int device, void* stream);
/* The same allocation as a C API call: *out the address (NULL for 0 bytes), and
 * AUTOVM_ERR_OUT_OF_MEMORY when the pool refuses it, so that a caller compiled against the
 * trainer's torch can raise PyTorch's own out-of-memory error (python/autovm/torch_oom.cpp);
 * any other status is another failure (no pool, another device). */
AUTOVM_EXPORT autovm_status autovm_torch_try_alloc(size_t size, int device, void* stream,
                                                   void** out);
AUTOVM_EXPORT void autovm_torch_free(void* ptr, size_t size, int device, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* AUTOVM_AUTOVM_H */
