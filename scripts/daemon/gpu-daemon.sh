#!/usr/bin/env bash
# lithosd on the GPU: what scripts/daemon's results in docs/daemon.md come
# from. Runs on the GPU machine with the release build carried over
# (build/release/bin/lithos, build/release/lib/liblithos.so); writes under
# $OUT (default /tmp/lithos-daemon) and prints a short table last.
#
# Phases (DAEMON_PHASES, default "hotpath widen"; "bench" is separate, it
# takes minutes):
#   hotpath  per-launch host cost from PyTorch: plain, under `lithos run`
#            (no set), as a high-priority tenant of lithosd, as a best-effort
#            tenant running free (no service connected: no grants), and as one
#            with running free off (every launch waits for its grant); the
#            client's grant-wait quantiles from its statistics
#   widen    issue 11's cost of widening: GPT training on 0-7 (clusters
#            widened to whole GPCs) and on 8 TPCs that form one whole GPC
#   bench    lithos bench hybrid-stacking --modes alone,lithos,lithos-fixed
#   tune     hybrid-stacking under lithosd with other throttle / atom targets
#            (TUNE, default "throttle_us=1000 atom_us=1000"; each entry
#            name=value[,name=value...] sets LITHOSD_<NAME> for each); the
#            alone runs once, copied in
#   solo     solo-training and solo-service: one tenant, alone vs lithos (the
#            cost of the mechanism with no co-tenant)
#   detect   completion detection: scripts/daemon/detect_delay.py as a
#            high-priority tenant of a tracing lithosd; the daemon's CPU
#   stack    inference-stacking (two hp tenants with quotas + a be trainer)
#            under STACK_MODES (default alone,mps,static-partition,lithos)
#   hol      head-of-line-steal under HOL_MODES (default
#            alone,mps,lithos): hp P99 vs alone + 1 atom
#   load     hybrid-stacking with the service at LOADS (default "0.2 0.8"),
#            alone and lithos each (load 0.5 is the bench phase)
#   trace    hybrid-stacking under lithosd with LITHOSD_TRACE set, then
#            `lithos daemon --replay` of that trace: the real run's decisions
#            must come out again (after bench: it reuses bench's alone runs);
#            then the trace as a `lithos sim` scenario, simulated
#   defer    deferred launches (docs/daemon.md): defer_check.py plain and as a
#            best-effort tenant waiting for grants (results must be equal bit
#            for bit), the host cost per launch with deferral on and off
#   hpcost   the hp launch overhead, interleaved: plain, `lithos run` and an
#            hp tenant of lithosd, HPCOST_ROUNDS rounds (default 4), each
#            launch_cost.py pinned to HPCOST_CPUS (default "2,3": two cores,
#            so that the client's tracker thread does not share the
#            application's); medians per label last. HPCOST_BASELINE=DIR
#            (another build carried over: DIR/bin/lithos, DIR/lib/liblithos.so)
#            adds label hpbase, an hp tenant of that build's lithosd
#   hpstep   the same in lock step (scripts/daemon/launch_cost_lockstep.py:
#            one long-lived worker per label, short bursts in turn, so that
#            the board's drift cancels in the per-round differences), eager
#            launches and CUDA-graph replays; HPSTEP_ROUNDS, HPSTEP_LAUNCHES,
#            HPCOST_CPUS and HPCOST_BASELINE as above
#   prio     scripts/daemon/prio_probe.cu: which streams take a priority, and
#            whether a priority reaches across MPS clients (a short request's
#            latency beside a flooding process, with each way of raising it,
#            the stream attribute lithos uses included), also beside grids
#            of several waves (atoms, whose later blocks are pending)
#   prioltd  the same probe beside atom-like floods with every launch masked
#            (lithos run --tpcs 64), then as lithosd's hp and be tenants
#            with stream priorities off and on; PRIO_FLOODS: the floods'
#            arguments after SECONDS, "_" for " " (default "1_4_125_128
#            1_4_125_1024"); PROBE_KERNEL=alu: the request's kernel is
#            arithmetic, slowed by blocks sharing its SMs
#   sysmps   a node whose MPS runs before lithos (default folders), nothing
#            cached: lithosd attaches, an hp and a be PyTorch client run
#            and finish, MPS outlives lithosd, lithos bench runs beside it
#   mpsusers MPS and two user ids, the control daemon in its default mode
#            and multi-user (-M): when does a second uid's job get the GPU
#            beside a first uid's, and from which server? Then both as
#            lithosd's clients: lithos status names the one outside MPS
#   mpsquit  lithosd with mps = "auto" starts MPS, a client spawns its
#            server, and no MPS process is left once lithosd has exited
#   mpscost  what being an MPS client costs with nothing beside it, and
#            where: scripts/daemon/mps_cost.cu (chains of empty, memory and
#            arithmetic kernels, launched one by one and as one graph) and
#            mps_cost.py (the bench's Llama decode graph, and eager: wall,
#            GPU time, the kernels' own time and the gaps between them from
#            the torch profiler), each as a plain process, as an MPS client,
#            and as one with CUDA_DEVICE_MAX_CONNECTIONS set (MPSCOST_CONNS,
#            e.g. "1 32"; none by default); mps_kernels.py (small graphs of
#            PyTorch ops at decode sizes) in each run; the decode graph and
#            mps_kernels.py with CUDA_MODULE_LOADING set (MPSCOST_LOADING,
#            default EAGER) as an MPS client and plain; plain again last
#            (drift); MPSCOST_CU=0 skips the bare kernels, MPSCOST_EAGER=0
#            the eager decode, MPSCOST_KERNELS=0 mps_kernels.py;
#            MPSCOST_GRAPH_PARAMS sets the decode graph's params (JSON, e.g.
#            with "compile": true)
#   ahead    LITHOS_SUBMIT_AHEAD (docs/daemon.md, "Why best-effort training is
#            slow"): solo-training with every launch granted, then
#            hybrid-stacking, each with it off / on / off / on against one
#            alone run (AHEAD_SCENARIOS, AHEAD_VALUES choose)
#   graphs   best-effort CUDA graphs replayed node by node (graph_replay.hpp):
#            graph_check.py plain and as a best-effort tenant that waits for
#            grants, with and without the atomizer (results must be equal bit
#            for bit; the last part trains under torch.compile's
#            reduce-overhead mode, cudagraph trees), and the graph_replay
#            statistics of each client
#   graphsms on which SMs a best-effort graph launched whole runs
#            (scripts/daemon/graph_sms.cu), built at its first launch or at
#            an upload: plain, and as a trainer of lithosd running free
#            (no service) with LITHOS_GRAPH_REPLAY=0 (it runs whole for
#            good: built on the TPCs no quota holds) and =1 (replayable:
#            whole at once while running free); and whether PyTorch's
#            libtorch_cuda.so calls cudaGraphUpload
#   zoo      shapes of real programs the bench tenants lack
#            (scripts/daemon/zoo_check.py: DataLoader workers forked from a
#            CUDA process, multiprocessing spawn, fork + normal exit, two
#            launching threads, exit with work in flight, FP8 GEMMs and
#            flash attention, NCCL with one rank, a first kernel made inside
#            a graph capture), each plain, as a
#            best-effort tenant waiting for grants (atomized) and as a
#            high-priority one: exit 0, output equal to plain, and no client
#            left registered once they have all exited (ZOO_SHAPES chooses)
#   pipeline where a best-effort queue's time goes (scripts/daemon/pipeline_gaps.py)
#            in traced mode-lithos runs: PIPE_RUNS entries SCENARIO[:NAME=VALUE,...]
#            (each NAME=VALUE sets LITHOSD_NAME; LITHOS_X=V, a client variable,
#            is set as it is), default solo-training with
#            every launch granted, and hybrid-stacking; one alone run each;
#            PIPE_TENANT names the queue's tenant (default train; be for the
#            head-of-line scenarios); PIPE_KEEP_TRACE=1 keeps each trace
#            (trace.jsonl.gz)
#   matrix   MATRIX_SCENARIOS each alone once, then MATRIX_ENTRIES
#            (this|base[:NAME=VALUE,...]: this build or HPCOST_BASELINE's,
#            with LITHOSD_NAME=VALUE; LITHOS_X=V as it is) under mode lithos, interleaved
#            MATRIX_ROUNDS times (default 2)
#   versus   VERSUS_SCENARIO (default hybrid-stacking) under mode lithos with
#            this build and with HPCOST_BASELINE's (another build carried
#            over), interleaved VERSUS_ROUNDS times (default 2) against one
#            alone run; lithosd's CPU and stall line after each
# TUNE entries may also be env:NAME=VALUE (mode lithos with that variable set,
# e.g. env:LITHOS_DEFER_LAUNCHES=0).
set -uo pipefail
cd "$(dirname "$0")/../.."
LITHOS=$PWD/build/release/bin/lithos
OUT=${OUT:-/tmp/lithos-daemon}
WORK=$OUT/work
PHASES=${DAEMON_PHASES:-hotpath widen}
mkdir -p "$WORK"
has() { [[ " $PHASES " == *" $1 "* ]]; }
stamp() { echo "[$(date +%T)] $*"; }
"$LITHOS" --version
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
# The CPUs this job may use and whether its cgroup was throttled (a CPU
# quota stalls a spinning daemon and the clients alike).
cgroup_cpu() {
  echo "cpus: $(nproc) online to us; cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo n/a);" \
    "cpu.stat: $(grep -E 'nr_periods|nr_throttled|throttled_usec' /sys/fs/cgroup/cpu.stat 2>/dev/null | tr '\n' ' ')"
}
cgroup_cpu

SOCK=$WORK/lithosd.sock
daemon_pid=""
start_daemon() {
  cat >"$WORK/lithosd.toml" <<TOML
[daemon]
socket = "$SOCK"
mps = "off"
TOML
  cat scripts/daemon/tenants.toml >>"$WORK/lithosd.toml"
  "$LITHOS" daemon --config "$WORK/lithosd.toml" --device 0 >>"$WORK/lithosd.log" 2>&1 &
  daemon_pid=$!
  daemon_t0=$(date +%s.%N)
  for _ in $(seq 1 600); do
    "$LITHOS" status --socket "$SOCK" --json >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "lithosd did not come up:"; tail -n 20 "$WORK/lithosd.log"; return 1
}
stop_daemon() {
  [[ -n $daemon_pid ]] || return 0
  "$LITHOS" status --socket "$SOCK" --json >"$WORK/status-$1.json" 2>/dev/null
  "$LITHOS" status --socket "$SOCK" >"$WORK/status-$1.txt" 2>/dev/null
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["counters"]; print("daemon stalls ('"$1"'):", {k: c.get(k) for k in ("loops", "busy_loops", "max_spin_gap_us", "spin_gaps_over_1ms", "max_step_us", "max_submit_depth")})' \
    "$WORK/status-$1.json" 2>/dev/null
  # The daemon's CPU time over its life (utime + stime, /proc/PID/stat).
  local ticks; ticks=$(awk '{print $14 + $15}' "/proc/$daemon_pid/stat")
  echo "daemon CPU ($1): $(python3 -c "import sys; c=int(sys.argv[1])/int(sys.argv[2]); w=float(sys.argv[4])-float(sys.argv[3]); print(f'{c:.1f} s over {w:.1f} s = {100*c/w:.0f}% of one core')" "$ticks" "$(getconf CLK_TCK)" "$daemon_t0" "$(date +%s.%N)")"
  kill -TERM "$daemon_pid"; wait "$daemon_pid"; daemon_pid=""
}
trap 'stop_base_daemon; stop_daemon end' EXIT

# HPCOST_BASELINE=DIR (another build: DIR/bin/lithos, DIR/lib/liblithos.so,
# e.g. an older commit's, carried to the device): its lithosd beside this
# one (socket $BSOCK), for an hp tenant of it in the same rounds.
base_pid=""
BSOCK=$WORK/lithosd-base.sock
start_base_daemon() {
  [[ -n ${HPCOST_BASELINE:-} ]] || return 1
  sed "s|^socket = .*|socket = \"$BSOCK\"|" "$WORK/lithosd.toml" >"$WORK/lithosd-base.toml"
  "$HPCOST_BASELINE/bin/lithos" --version
  "$HPCOST_BASELINE/bin/lithos" daemon --config "$WORK/lithosd-base.toml" --device 0 >>"$WORK/lithosd-base.log" 2>&1 &
  base_pid=$!
  for _ in $(seq 1 300); do "$LITHOS" status --socket "$BSOCK" --json >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "the baseline's lithosd did not come up"; return 1
}
stop_base_daemon() {
  [[ -n $base_pid ]] || return 0
  kill -TERM "$base_pid"; wait "$base_pid"; base_pid=""
}

cost() {  # label [lithos run args...]
  local label=$1; shift
  if [[ $label == plain ]]; then
    timeout -s KILL 120 python3 scripts/daemon/launch_cost.py 20000 5 >"$WORK/cost-$label.json" 2>"$WORK/cost-$label.err"
  else
    LITHOS_STATS_FILE="$WORK/stats-$label-%p.json" timeout -s KILL 120 "$LITHOS" run "$@" -- \
      python3 scripts/daemon/launch_cost.py 20000 5 >"$WORK/cost-$label.json" 2>"$WORK/cost-$label.err"
  fi
  echo "cost $label: exit $? $(cat "$WORK/cost-$label.json")"
}
if has hotpath; then
  stamp "hotpath"
  cost plain
  cost interposed
  start_daemon && {
    cost hp --tenant svc --daemon "$SOCK"
    cost befree --tenant train --daemon "$SOCK"  # no service connected: runs free
    stop_daemon hotpath
  }
  LITHOSD_BEST_EFFORT_RUNS_FREE=false start_daemon && {
    cost be --tenant train --daemon "$SOCK"
    stop_daemon hotpath-grants
  }
  for f in "$WORK"/stats-hp-*.json "$WORK"/stats-befree-*.json "$WORK"/stats-be-*.json; do
    [[ -f $f ]] && echo "$(basename "$f"): $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d.get("daemon")))' "$f")"
  done
fi

has hotpath && cgroup_cpu
if has hpcost; then
  stamp "hpcost"
  # HPCOST_BASELINE=DIR (another build: DIR/bin/lithos, DIR/lib/liblithos.so,
  # e.g. an older commit's, carried to the device): its lithosd runs beside
  # this one and label hpbase is an hp tenant of it, in the same rounds.
  labels="plain interposed hp"
  start_daemon && {
    start_base_daemon && labels+=" hpbase"
    for r in $(seq 1 "${HPCOST_ROUNDS:-4}"); do
      for label in $labels; do
        case $label in
          plain) set -- ;;
          interposed) set -- "$LITHOS" run -- ;;
          hp) set -- "$LITHOS" run --tenant svc --daemon "$SOCK" -- ;;
          hpbase) set -- "$HPCOST_BASELINE/bin/lithos" run --tenant svc --daemon "$BSOCK" -- ;;
        esac
        timeout -s KILL 120 taskset -c "${HPCOST_CPUS:-2,3}" "$@" python3 scripts/daemon/launch_cost.py 20000 5 \
          >"$WORK/hpcost-$label-$r.json" 2>"$WORK/hpcost-$label-$r.err"
        echo "hpcost round $r $label: $(cat "$WORK/hpcost-$label-$r.json")"
      done
    done
    stop_base_daemon
    stop_daemon hpcost
  }
  python3 - "$WORK" <<'PY'
import glob, json, statistics, sys
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/hpcost-*.json")):
    label = f.rsplit("/", 1)[1].split("-")[1]
    try:
        rows.setdefault(label, []).append(json.load(open(f))["host_us"])
    except Exception:
        pass
base = statistics.median(rows.get("plain", [float("nan")]))
print("label       host us per launch (median of rounds)   rounds            vs plain")
for label in ("plain", "interposed", "hp", "hpbase"):
    v = rows.get(label, [])
    if v:
        m = statistics.median(v)
        print(f"{label:11s} {m:8.2f}                                {' '.join(f'{x:.2f}' for x in v):17s} {m - base:+.2f} us")
PY
fi
if has hpstep; then
  # The same in lock step (scripts/daemon/launch_cost_lockstep.py): one
  # worker per label, all alive at once, bursts of HPSTEP_LAUNCHES (default
  # 2000) taken in turn for HPSTEP_ROUNDS rounds (default 40), eager
  # launches and then graph replays; per-round differences from plain.
  stamp "hpstep"
  start_daemon && {
    runs=(--run "plain:" --run "interposed:$LITHOS run --" --run "hp:$LITHOS run --tenant svc --daemon $SOCK --")
    start_base_daemon && runs+=(--run "hpbase:$HPCOST_BASELINE/bin/lithos run --tenant svc --daemon $BSOCK --")
    for g in eager graph; do
      extra=(); [[ $g == graph ]] && extra=(--graph)
      echo "hpstep $g launches (us per launch, host time; differences per round, median and quartiles):"
      timeout -s KILL 280 taskset -c "${HPCOST_CPUS:-2,3}" python3 scripts/daemon/launch_cost_lockstep.py "${runs[@]}" \
        "${extra[@]}" --rounds "${HPSTEP_ROUNDS:-40}" --launches "${HPSTEP_LAUNCHES:-2000}" \
        --json "$OUT/hpstep-$g.json" --logs "$WORK/hpstep-$g"
    done
    stop_base_daemon
    stop_daemon hpstep
  }
fi
if has prio; then
  stamp "prio"
  nvcc -O2 -arch=sm_90 -o "$WORK/prio_probe" scripts/daemon/prio_probe.cu -lcuda || echo "prio_probe: build failed"
  P=$WORK/prio_probe
  timeout -s KILL 30 "$P" info
  probes() {  # $1: label
    for m in default stream attr nullattr launch graph; do timeout -s KILL 30 "$P" probe 300 $m | sed "s/^/$1 /"; done
  }
  probes "alone"
  timeout -s KILL 60 "$P" flood 12 >"$WORK/flood.out" & fp=$!
  sleep 1; probes "beside-flood-no-mps"; wait $fp
  export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps/pipe CUDA_MPS_LOG_DIRECTORY=$WORK/mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && sleep 1
  probes "mps-alone"
  timeout -s KILL 60 "$P" flood 12 >"$WORK/flood.out" & fp=$!
  sleep 1; probes "mps-beside-flood"; wait $fp
  CUDA_MPS_CLIENT_PRIORITY=1 timeout -s KILL 60 "$P" flood 12 >"$WORK/flood.out" & fp=$!
  sleep 1; probes "mps-beside-flood-at-client-priority-1"; wait $fp
  timeout -s KILL 60 "$P" flood 12 4 >"$WORK/flood.out" & fp=$!
  sleep 1; probes "mps-beside-4-stream-flood"; wait $fp
  CUDA_MPS_CLIENT_PRIORITY=1 timeout -s KILL 60 "$P" flood 12 4 >"$WORK/flood.out" & fp=$!
  sleep 1; probes "mps-beside-4-stream-flood-at-client-priority-1"; wait $fp
  # One stream of atoms: grids of 4 waves of 125 us blocks (head-of-line-
  # steal's 5 ms phase), so blocks of the running grid are pending.
  timeout -s KILL 60 "$P" flood 15 1 4 125 >"$WORK/flood.out" & fp=$!
  sleep 1; probes "mps-beside-atom-flood"; wait $fp
  echo quit | nvidia-cuda-mps-control; sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
if has prioltd; then
  stamp "prioltd"
  # The same request beside a flood of atom-like grids (4 waves of 125 us
  # blocks, of 128 or of 1024 threads), under MPS: first with both processes'
  # launches masked by the descriptor hook (lithos run --tpcs 64, no
  # daemon), then with the flood a best-effort tenant of lithosd (each grid
  # waits for its grant) and the request a high-priority one, stream
  # priorities off and on. Does a priority still let the request past the
  # flood's pending blocks there, as it does between plain processes?
  [[ -x $WORK/prio_probe ]] || nvcc -O2 -arch=sm_90 -o "$WORK/prio_probe" scripts/daemon/prio_probe.cu -lcuda
  P=$WORK/prio_probe
  export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps2/pipe CUDA_MPS_LOG_DIRECTORY=$WORK/mps2/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && sleep 1
  # No cached slot map: every lithos run and lithosd below calibrates while
  # MPS runs (outside it: docs/gpu.md "Calibration under MPS").
  export LITHOS_CACHE_DIR=$WORK/cache-under-mps
  rm -rf "$LITHOS_CACHE_DIR"
  floods=(${PRIO_FLOODS:-1_4_125_128 1_4_125_1024})
  # The request alone under MPS (PROBE_KERNEL=alu: its arithmetic kernel's own time).
  for m in default attr; do timeout -s KILL 30 "$LITHOS" run --tpcs 64 -- "$P" probe 300 $m | sed "s/^/masked, alone: /"; done
  for fl in "${floods[@]}"; do
    fl=${fl//_/ }
    timeout -s KILL 60 "$LITHOS" run --tpcs 64 -- "$P" flood 10 $fl >"$WORK/flood.out" & fp=$!
    sleep 2
    for m in default attr; do
      timeout -s KILL 30 "$LITHOS" run --tpcs 64 -- "$P" probe 300 $m | sed "s/^/masked, flood ($fl): /"
    done
    wait $fp
  done
  for sp in false true; do
    LITHOSD_STREAM_PRIORITIES=$sp start_daemon || continue
    for fl in "${floods[@]}"; do
      fl=${fl//_/ }
      timeout -s KILL 60 "$LITHOS" run --daemon "$SOCK" --tenant train -- "$P" flood 10 $fl >"$WORK/flood.out" & fp=$!
      sleep 2
      for m in default attr; do
        timeout -s KILL 30 "$LITHOS" run --daemon "$SOCK" --tenant svc -- "$P" probe 300 $m |
          sed "s/^/lithosd stream_priorities=$sp, flood ($fl): /"
      done
      wait $fp
    done
    stop_daemon "prioltd-$sp"
  done
  echo quit | nvidia-cuda-mps-control; sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY LITHOS_CACHE_DIR
fi
if has sysmps; then
  stamp "sysmps"
  # A node whose MPS control daemon runs before lithos arrives (the usual
  # fleet set-up: default folders, /tmp/nvidia-mps), and nothing cached:
  # lithosd (mps = "auto") attaches to it; an hp and a be client, both
  # PyTorch, run under it and finish; lithosd stops and leaves MPS running;
  # then lithos bench runs its modes beside that MPS (its own private MPS
  # for the MPS modes, plain processes for the others).
  S=$WORK/sysmps; rm -rf "$S"; mkdir -p "$S"
  export LITHOS_CACHE_DIR=$S/cache
  ( unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d ) && sleep 1
  echo "sysmps: machine MPS up: $(pgrep -x nvidia-cuda-mps | wc -l) process(es)"
  printf '[daemon]\nsocket = "%s"\nmps = "auto"\nstate_dir = "%s"\n' "$S/sock" "$S/state" >"$S/lithosd.toml"
  cat scripts/daemon/tenants.toml >>"$S/lithosd.toml"
  (unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; exec "$LITHOS" daemon --config "$S/lithosd.toml" --device 0) \
    >"$S/lithosd.log" 2>&1 & sp=$!
  for _ in $(seq 1 300); do "$LITHOS" status --socket "$S/sock" --json >/dev/null 2>&1 && break; sleep 0.1; done
  job='import sys, time, torch
x = torch.randn(4096, 4096, device="cuda")
t0 = time.time(); n = 0
while time.time() - t0 < 4:
    y = x @ x; n += 1
    if sys.argv[1] == "svc": torch.cuda.synchronize(); time.sleep(0.002)
torch.cuda.synchronize(); print(sys.argv[1], "ok", n, "matmuls")'
  for who in svc train; do
    (unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
     timeout -s KILL 120 "$LITHOS" run --daemon "$S/sock" --tenant $who -- python3 -c "$job" $who \
       >"$S/$who.out" 2>"$S/$who.err"; echo "exit $?" >>"$S/$who.out") &
  done
  sleep 6
  "$LITHOS" status --socket "$S/sock" --json >"$S/status.json" 2>/dev/null
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("sysmps: status: clients", [(c.get("tenant"), c.get("pid")) for c in d.get("clients", [])], "grants", d["counters"].get("grants"))' "$S/status.json" 2>&1
  wait $(jobs -p | grep -v "^$sp$") 2>/dev/null
  for who in svc train; do echo "sysmps: $who: $(tr '\n' ' ' <"$S/$who.out") $(grep -i lithos "$S/$who.err" | head -n 3 | tr '\n' ' ')"; done
  grep -E "MPS|slot map|serving" "$S/lithosd.log" | head -n 5 | sed "s/^/sysmps: lithosd: /"
  kill -TERM "$sp"; wait "$sp"
  echo "sysmps: after lithosd exited: $(pgrep -x nvidia-cuda-mps | wc -l) MPS process(es) (the machine's: must be running)"
  (unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
   timeout -s KILL 300 "$LITHOS" bench head-of-line-steal --modes alone,time-slicing,mps,lithos --reps 1 --window 1 \
     --warmup 0.5 --out "$S/bench" --no-plots -q 2>&1 | tail -n 8 | sed "s/^/sysmps: bench: /")
  python3 - "$S/bench" <<'PY' 2>&1 | sed "s/^/sysmps: /"
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/runs/*.json")):
    r = json.load(open(f))
    print(f.split("/")[-1], r.get("status"), [(t["name"], (t.get("info") or {}).get("mps_pipe_directory")) for t in r.get("tenants", [])])
PY
  (unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1)
  sleep 2; echo "sysmps: after quit: $(pgrep -x nvidia-cuda-mps | wc -l) MPS process(es)"
  unset LITHOS_CACHE_DIR
fi
if has mpsusers; then
  stamp "mpsusers"
  # MPS runs one server per user id unless the control daemon runs in
  # multi-user mode (-M): a root job of ~8 s and, 2 s into it, a job of uid
  # 65534, both MPS clients of one control daemon (default mode, then -M):
  # when does the second one's CUDA start, and whose server serves it?
  job='import os, sys, time
t0 = time.time()
import torch
x = torch.ones(1 << 20, device="cuda")
t1 = time.time()
end = t1 + float(sys.argv[1])
while time.time() < end:
    x = x * 1.0001
torch.cuda.synchronize()
print(f"uid {os.getuid()}: CUDA ready {t1 - t0:.1f} s after start, at {t1:.1f}; done at {time.time():.1f}")'
  # Every folder under /tmp, reachable by uid 65534 ($OUT may sit under a
  # home folder it cannot enter: a client that cannot reach the pipe runs
  # outside MPS, which the first version of this phase measured).
  for mode in ${MPSUSERS_MODES-default multiuser}; do
    U=/tmp/lithos-mpsusers-$mode; rm -rf "$U"; mkdir -p "$U/pipe" "$U/log" "$U/home"; chmod 1777 "$U" "$U/pipe" "$U/log" "$U/home"
    export CUDA_MPS_PIPE_DIRECTORY=$U/pipe CUDA_MPS_LOG_DIRECTORY=$U/log
    flags=(-d); [[ $mode == multiuser ]] && flags=(-d -M)
    nvidia-cuda-mps-control "${flags[@]}" && sleep 1
    ls -la "$U/pipe" | sed "s/^/mpsusers $mode: pipe: /"
    python3 -c "$job" 8 >"$U/root.out" 2>&1 & r=$!
    sleep 2
    echo "mpsusers $mode: second job starts at $(date +%s.%N)"
    timeout -s KILL 40 setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$U/home" python3 -c "$job" 1 \
      >"$U/other.out" 2>&1; echo "mpsusers $mode: uid 65534 job exit $?"
    wait $r
    cat "$U/root.out" "$U/other.out" | tail -n 6 | sed "s/^/mpsusers $mode: /"
    grep -E "CLIENT|SERVER|user|uid" "$U/log/control.log" | sed "s/^/mpsusers $mode: control.log: /" | head -n 12
    echo quit | nvidia-cuda-mps-control; sleep 2
    echo "mpsusers $mode: MPS processes after quit: $(pgrep -x nvidia-cuda-mps | wc -l)"
  done
  # The same two users as lithosd's clients (root: svc, uid 65534: train):
  # lithos status names a client outside MPS beside MPS clients. lithos and
  # its library are copied where uid 65534 may read them.
  # (Outside $OUT, which may sit under a home folder other users cannot enter.)
  U=/tmp/lithos-mpsusers; rm -rf "$U"; mkdir -p "$U/pipe" "$U/log" "$U/home" "$U/lx/bin" "$U/lx/lib"
  cp "$LITHOS" "$U/lx/bin/" && cp build/release/lib/liblithos.so "$U/lx/lib/"
  chmod -R a+rwX "$U"; chmod 1777 "$U"  # lithosd refuses a socket folder anyone may write to without the sticky bit
  export CUDA_MPS_PIPE_DIRECTORY=$U/pipe CUDA_MPS_LOG_DIRECTORY=$U/log
  # MPSUSERS_LITHOSD_MPS: the control daemon's flags (default -d), or
  # "lithosd": none is started here, lithosd starts it (mps_multiuser).
  if [[ ${MPSUSERS_LITHOSD_MPS:--d} != lithosd ]]; then
    nvidia-cuda-mps-control ${MPSUSERS_LITHOSD_MPS:--d} && sleep 1
  fi
  echo "mpsusers lithosd: MPS control daemon started by ${MPSUSERS_LITHOSD_MPS:--d}"
  printf '[daemon]\nsocket = "%s"\nmps = "auto"\nstate_dir = "%s"\n' "$U/sock" "$U/state" >"$U/lithosd.toml"
  cat scripts/daemon/tenants.toml >>"$U/lithosd.toml"
  "$U/lx/bin/lithos" daemon --config "$U/lithosd.toml" --device 0 >"$U/lithosd.log" 2>&1 & lp=$!
  for _ in $(seq 1 300); do "$LITHOS" status --socket "$U/sock" --json >/dev/null 2>&1 && break; sleep 0.1; done
  "$LITHOS" status --socket "$U/sock" --json >/dev/null 2>&1 || tail -n 5 "$U/lithosd.log" | sed "s/^/mpsusers lithosd: did not come up: /"
  chmod a+rw "$U/sock" 2>/dev/null
  "$U/lx/bin/lithos" run --daemon "$U/sock" --tenant svc -- python3 -c "$job" 10 >"$U/root.out" 2>&1 & r=$!
  sleep 2
  timeout -s KILL 60 setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$U/home" \
    "$U/lx/bin/lithos" run --daemon "$U/sock" --tenant train -- python3 -c "$job" 6 >"$U/other.out" 2>&1 & o=$!
  for _ in $(seq 1 80); do
    "$LITHOS" status --socket "$U/sock" --json >"$U/status.json" 2>/dev/null
    python3 -c 'import json,sys; sys.exit(0 if len(json.load(open(sys.argv[1]))["clients"]) >= 2 else 1)' "$U/status.json" 2>/dev/null && break
    sleep 0.25
  done
  "$LITHOS" status --socket "$U/sock" | grep -E "^client|^[0-9]|^warning" | sed "s/^/mpsusers lithosd: status: /"
  wait $r; wait $o
  tail -n 2 "$U/root.out" "$U/other.out" | sed "s/^/mpsusers lithosd: /"
  grep -E "outside MPS|slot map|MPS" "$U/lithosd.log" | sed "s/^/mpsusers lithosd: log: /"
  kill -TERM "$lp"; wait "$lp"
  echo quit | nvidia-cuda-mps-control; sleep 2
  cp "$U/lithosd.log" "$U/status.json" "$WORK/" 2>/dev/null
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
if has mpsquit; then
  stamp "mpsquit"
  # lithosd starts MPS (mps = "auto", none running), a client spawns the
  # server, lithosd stops: it quits MPS and waits for it to be gone, so no
  # MPS process may be left the moment lithosd has exited.
  Q=$WORK/mpsquit; mkdir -p "$Q/pipe" "$Q/log"
  export CUDA_MPS_PIPE_DIRECTORY=$Q/pipe CUDA_MPS_LOG_DIRECTORY=$Q/log
  printf '[daemon]\nsocket = "%s"\nmps = "auto"\n' "$Q/sock" >"$Q/lithosd.toml"
  cat scripts/daemon/tenants.toml >>"$Q/lithosd.toml"
  "$LITHOS" daemon --config "$Q/lithosd.toml" --device 0 >"$Q/lithosd.log" 2>&1 & qp=$!
  for _ in $(seq 1 300); do "$LITHOS" status --socket "$Q/sock" --json >/dev/null 2>&1 && break; sleep 0.1; done
  timeout -s KILL 120 "$LITHOS" run --daemon "$Q/sock" --tenant train -- \
    python3 -c 'import torch; x = torch.ones(1 << 20, device="cuda"); print("client sum", float((x * 2).sum()))'
  echo "mpsquit: MPS processes with lithosd up: $(pgrep -x nvidia-cuda-mps | wc -l)"
  t0=$(date +%s.%N); kill -TERM "$qp"; wait "$qp"; echo "mpsquit: lithosd exited (status $?) after $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$(date +%s.%N)") s"
  left=$(pgrep -x nvidia-cuda-mps | wc -l)
  [[ $left == 0 ]] && echo "mpsquit: PASS no MPS process left when lithosd exited" ||
    echo "mpsquit: FAIL $left MPS process(es) left when lithosd exited"
  grep -iE "mps" "$Q/lithosd.log" | tail -n 5
  echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
if has mpscost; then
  stamp "mpscost"
  C=$WORK/mpscost; rm -rf "$C"; mkdir -p "$C"
  nvcc -O2 -arch=sm_90 -o "$C/mps_cost" scripts/daemon/mps_cost.cu || echo "mps_cost: build failed"
  mpscost_run() {  # $1: label; the environment says the rest
    [[ ${MPSCOST_CU:-1} == 1 && -x $C/mps_cost ]] && timeout -s KILL 120 "$C/mps_cost" 200 >"$C/$1.cu.txt" 2>&1
    sed "s/^/mpscost $1: /" "$C/$1.cu.txt" 2>/dev/null | grep -E "# | 256 |kernel_gpu|chase"
    timeout -s KILL 240 python3 scripts/daemon/mps_cost.py --label "$1 graph" --json "$C/$1.graph.json" \
      ${MPSCOST_GRAPH_PARAMS:+--params "$MPSCOST_GRAPH_PARAMS"} 2>"$C/$1.graph.err" | sed "s/^/mpscost /"
    [[ ${MPSCOST_EAGER:-1} == 1 ]] && timeout -s KILL 240 python3 scripts/daemon/mps_cost.py --label "$1 eager" --reps 100 \
      --params '{"batch": 8, "ctx": 1024, "graph": false}' --json "$C/$1.eager.json" 2>"$C/$1.eager.err" | sed "s/^/mpscost /"
    [[ ${MPSCOST_KERNELS:-1} == 1 ]] && timeout -s KILL 240 python3 scripts/daemon/mps_kernels.py --label "$1" \
      --json "$C/$1.kernels.json" 2>"$C/$1.kernels.err" | sed "s/^/mpscost /"
  }
  (unset CUDA_MPS_PIPE_DIRECTORY; mpscost_run plain)
  export CUDA_MPS_PIPE_DIRECTORY=$C/pipe CUDA_MPS_LOG_DIRECTORY=$C/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && sleep 1
  mpscost_run mps
  for n in ${MPSCOST_CONNS-}; do (export CUDA_DEVICE_MAX_CONNECTIONS=$n; mpscost_run "mps-conns$n"); done
  for l in ${MPSCOST_LOADING-EAGER}; do (export CUDA_MODULE_LOADING=$l MPSCOST_CU=0 MPSCOST_EAGER=0; mpscost_run "mps-loading$l"); done
  echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1; sleep 2
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  for l in ${MPSCOST_LOADING-EAGER}; do (export CUDA_MODULE_LOADING=$l MPSCOST_CU=0 MPSCOST_EAGER=0; mpscost_run "plain-loading$l"); done
  mpscost_run plain2
fi
if has defer; then
  stamp "defer"
  timeout -s KILL 120 python3 scripts/daemon/defer_check.py 40 >"$WORK/defer-plain.json" 2>"$WORK/defer-plain.err"
  echo "defer_check plain: exit $?"
  LITHOSD_BEST_EFFORT_RUNS_FREE=false start_daemon && {
    for d in 1 0; do
      LITHOS_DEFER_LAUNCHES=$d LITHOS_STATS_FILE="$WORK/stats-defer$d-%p.json" timeout -s KILL 180 "$LITHOS" run \
        --tenant train --daemon "$SOCK" -- python3 scripts/daemon/defer_check.py 40 \
        >"$WORK/defer-be$d.json" 2>"$WORK/defer-be$d.err"
      echo "defer_check be (LITHOS_DEFER_LAUNCHES=$d): exit $?; equal to plain: $(cmp -s "$WORK/defer-plain.json" "$WORK/defer-be$d.json" && echo yes || echo NO)"
      tail -n 3 "$WORK/defer-be$d.err"
    done
    LITHOS_DEFER_LAUNCHES=1 cost be-defer --tenant train --daemon "$SOCK"
    LITHOS_DEFER_LAUNCHES=0 cost be-nodefer --tenant train --daemon "$SOCK"
    stop_daemon defer
  }
  for f in "$WORK"/stats-defer*.json "$WORK"/stats-be-*defer-*.json; do
    [[ -f $f ]] && echo "$(basename "$f"): $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d.get("daemon")))' "$f")"
  done
  head -c 300 "$WORK/defer-plain.json"; echo
fi

if has zoo; then
  stamp "zoo"
  LITHOSD_BEST_EFFORT_RUNS_FREE=false start_daemon && {
    for shape in ${ZOO_SHAPES:-dataloader spawn fork-exit threads exit-busy hopper nccl capture-first}; do
      for v in plain be hp; do
        label=zoo-$shape-$v
        run=(); [[ $v == be ]] && run=("$LITHOS" run --tenant train --daemon "$SOCK" --atomize --)
        [[ $v == hp ]] && run=("$LITHOS" run --tenant svc --daemon "$SOCK" --)
        t0=$(date +%s.%N)
        LITHOS_STATS_FILE="$WORK/stats-$label-%p.json" timeout -s KILL 180 "${run[@]}" \
          python3 scripts/daemon/zoo_check.py "$shape" >"$WORK/$label.json" 2>"$WORK/$label.err"
        rc=$?
        same=""; [[ $v != plain ]] && same="; equal to plain: $(cmp -s "$WORK/zoo-$shape-plain.json" "$WORK/$label.json" && echo yes || echo NO)"
        echo "zoo $shape $v: exit $rc in $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s$same"
        [[ $rc == 0 && -s $WORK/$label.json ]] || tail -n 8 "$WORK/$label.err"
        grep -h "lithos\[" "$WORK/$label.err" | sort | uniq -c | head -n 5
      done
      head -c 160 "$WORK/zoo-$shape-plain.json"; echo
    done
    sleep 1.5  # a client killed or gone is reclaimed within 1 s
    "$LITHOS" status --socket "$SOCK" --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print("zoo: clients still registered:", len(j["clients"]), [(c.get("tenant"), c.get("pid")) for c in j["clients"]])'
    stop_daemon zoo
  }
fi

if has graphs; then
  stamp "graphs"
  timeout -s KILL 300 python3 scripts/daemon/graph_check.py 20 >"$WORK/graph-plain.json" 2>"$WORK/graph-plain.err"
  echo "graph_check plain: exit $? $(tail -n 1 "$WORK/graph-plain.err")"
  LITHOSD_TRACE=$WORK/graphs.jsonl LITHOSD_BEST_EFFORT_RUNS_FREE=false start_daemon && {
    for v in "replay:1" "replay:0" "atomize:1"; do
      label=graph-${v/:/}
      extra=(); [[ $v == atomize:* ]] && extra=(--atomize)
      LITHOS_GRAPH_REPLAY=${v#*:} LITHOS_STATS_FILE="$WORK/stats-$label-%p.json" timeout -s KILL 300 "$LITHOS" run \
        --tenant train --daemon "$SOCK" "${extra[@]}" -- python3 scripts/daemon/graph_check.py 20 \
        >"$WORK/$label.json" 2>"$WORK/$label.err"
      echo "graph_check be $v: exit $?; equal to plain: $(cmp -s "$WORK/graph-plain.json" "$WORK/$label.json" && echo yes || echo NO); $(grep graph_check: "$WORK/$label.err")"
      [[ -s $WORK/$label.json ]] || tail -n 5 "$WORK/$label.err"
      for f in "$WORK"/stats-"$label"-*.json; do
        [[ -f $f ]] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])).get("daemon") or {}; print("  graph_replay", json.dumps(d.get("graph_replay")), "grants", d.get("grants"), "fallbacks", d.get("fallbacks"))' "$f"
      done
    done
    stop_daemon graphs
    # Where the launches waited for their grants (whole graph replays among them).
    python3 scripts/daemon/grant_waits.py "$WORK/graphs.jsonl" 8
    rm -f "$WORK/graphs.jsonl"
  }
  head -c 200 "$WORK/graph-plain.json"; echo
fi

if has graphsms; then
  stamp "graphsms"
  nvcc -O2 -arch=sm_90 -o "$WORK/graph_sms" scripts/daemon/graph_sms.cu || echo "graph_sms: build failed"
  tl=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
  echo "graphsms: $tl names cudaGraphUpload $(grep -a -o cudaGraphUpload "$tl" 2>/dev/null | wc -l) time(s)"
  sms_of() {  # $1: label; reads graph_sms's line
    python3 -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print(sys.argv[1] + ":", [r["count"] for r in d.get("replays", [])], "SMs of", d.get("sms"), "per replay")' "$1"
  }
  for m in launch upload; do timeout -s KILL 60 "$WORK/graph_sms" $m | sms_of "graphsms plain, $m"; done
  start_daemon && {
    for r in 0 1; do
      for m in launch upload; do
        LITHOS_GRAPH_REPLAY=$r timeout -s KILL 60 "$LITHOS" run --tenant train --daemon "$SOCK" -- "$WORK/graph_sms" $m \
          2>"$WORK/graphsms-$r-$m.err" | sms_of "graphsms be running free, LITHOS_GRAPH_REPLAY=$r, $m"
      done
    done
    stop_daemon graphsms
  }
fi
if has detect; then
  # Once per hp_poll_us value in DETECT_POLLS (default: the configured one).
  for poll in ${DETECT_POLLS:-default}; do
    stamp "detect (hp_poll_us $poll)"
    sfx=""; vars=(LITHOSD_TRACE="$WORK/detect.jsonl")
    [[ $poll != default ]] && { sfx=-poll$poll; vars+=(LITHOSD_HP_POLL_US="$poll"); }
    export "${vars[@]}"
    start_daemon && {
      timeout -s KILL 120 "$LITHOS" run --tenant svc --daemon "$SOCK" -- \
        python3 scripts/daemon/detect_delay.py probe 2000 "$WORK/detect-probe$sfx.json" 2>"$WORK/detect$sfx.err"
      echo "probe exit $?"
      stop_daemon "detect$sfx"
      python3 scripts/daemon/detect_delay.py analyse "$WORK/detect.jsonl" "$WORK/detect-probe$sfx.json" | tee "$WORK/detect$sfx.json"
      rm -f "$WORK/detect.jsonl"
    }
    unset LITHOSD_TRACE LITHOSD_HP_POLL_US
  done
fi

if has widen; then
  stamp "widen"
  for s in "0-7" "1,9,17,25,32,39,46,53"; do
    label=gpt-$(echo "$s" | tr ',' '_')
    LITHOS_STATS_FILE="$WORK/stats-$label-%p.json" timeout -s KILL 240 "$LITHOS" run --tpc-set "$s" -- \
      python3 scripts/bench/mask_diag.py gpt training '{}' 30 >"$WORK/$label.out" 2>"$WORK/$label.err"
    echo "widen $label: exit $? $(tail -c 200 "$WORK/$label.out") $(python3 -c 'import json,sys,glob; d=json.load(open(glob.glob(sys.argv[1])[0])); print(json.dumps(d.get("safe")))' "$WORK/stats-$label-*.json" 2>/dev/null)"
  done
fi

if has bench; then
  stamp "bench"
  timeout -s KILL 560 "$LITHOS" bench hybrid-stacking --modes "${BENCH_MODES:-alone,lithos,lithos-fixed}" \
    --out "$OUT/bench-hybrid" --no-plots ${BENCH_ARGS:-} 2>"$WORK/bench.err" | tail -n 40
  echo "bench exit ${PIPESTATUS[0]}"; tail -n 15 "$WORK/bench.err"
  for f in "$OUT"/bench-hybrid/logs/lithos/lithosd.log; do [[ -f $f ]] && tail -n 5 "$f"; done
fi
# Each bench's logs as one archive ($OUT keeps at most a few folder levels).
pack_logs() { [[ -d $1/logs ]] && tar -czf "$1/logs.tar.gz" -C "$1" logs && rm -rf "$1/logs"; }

if has tune; then
  # TUNE_SCENARIO (default hybrid-stacking) once alone, then each TUNE entry
  # against that alone run: NAME=VALUE[,NAME=VALUE...] runs mode lithos with
  # LITHOSD_NAME=VALUE for each, mode:NAME runs that mode.
  sc=${TUNE_SCENARIO:-hybrid-stacking}
  stamp "tune $sc"
  base=$OUT/tune-$sc-alone
  timeout -s KILL 200 "$LITHOS" bench "$sc" --modes alone --out "$base" --no-plots -q | grep -E "^alone"
  for kv in ${TUNE:-throttle_us=1000 atom_us=1000}; do
    dir=$OUT/tune-$sc-${kv//[=:,]/-}
    mkdir -p "$dir/runs" && cp "$base"/runs/alone-*.json "$dir/runs/"
    if [[ $kv == mode:* ]]; then
      timeout -s KILL 150 "$LITHOS" bench "$sc" --modes "${kv#mode:}" --out "$dir" --no-plots -q
    elif [[ $kv == env:* ]]; then
      env "${kv#env:}" timeout -s KILL 150 "$LITHOS" bench "$sc" --modes lithos --out "$dir" --no-plots -q
    else
      # NAME=VALUE[,NAME=VALUE...]: each sets LITHOSD_NAME.
      vars=()
      IFS=, read -ra pairs <<<"$kv"
      for p in "${pairs[@]}"; do name=${p%%=*}; vars+=("LITHOSD_${name^^}=${p#*=}"); done
      env "${vars[@]}" timeout -s KILL 150 "$LITHOS" bench "$sc" --modes lithos --out "$dir" --no-plots -q
    fi | grep -vE "^(alone|mode|-+|report:|$|hybrid|solo)" | sed "s/^/$kv  /"
    grep -hE "predictor cache|lithosd: CPU" "$dir"/logs/lithos/lithosd.log 2>/dev/null | sed "s/^/$kv  /"
    # Stream priorities the clients set (client statistics, docs/daemon.md).
    grep -rhoE '"class":"[a-z-]+"|"stream_priority":\{[^}]*\}' "$dir"/logs 2>/dev/null | paste -d' ' - - | sort | uniq -c |
      sed "s/^/$kv  /"
    pack_logs "$dir"
  done
  pack_logs "$base"
fi

if has versus && [[ -n ${HPCOST_BASELINE:-} ]]; then
  sc=${VERSUS_SCENARIO:-hybrid-stacking}
  stamp "versus $sc"
  base=$OUT/versus-$sc-alone
  timeout -s KILL 200 "$LITHOS" bench "$sc" --modes alone --out "$base" --no-plots -q | grep -E "^alone"
  for r in $(seq 1 "${VERSUS_ROUNDS:-2}"); do
    for who in this baseline; do
      bin=$LITHOS; [[ $who == baseline ]] && bin=$HPCOST_BASELINE/bin/lithos
      dir=$OUT/versus-$sc-$who-$r
      mkdir -p "$dir/runs" && cp "$base"/runs/alone-*.json "$dir/runs/"
      timeout -s KILL 150 "$bin" bench "$sc" --modes lithos --out "$dir" --no-plots -q | grep -E "^lithos" |
        sed "s/^/$who ($("$bin" --version | grep -oE '\([0-9a-f-]+(-dirty)?\)'), round $r)  /"
      grep -h "lithosd: CPU" "$dir"/logs/lithos/lithosd.log 2>/dev/null | sed "s/^/$who  /"
      pack_logs "$dir"
    done
  done
  pack_logs "$base"
fi

if has matrix; then
  # MATRIX_SCENARIOS (names or .toml paths) each once alone, then
  # MATRIX_ENTRIES under mode lithos, interleaved MATRIX_ROUNDS times
  # (default 2). An entry is this|base[:NAME=VALUE,...]: this build or
  # HPCOST_BASELINE's, each NAME=VALUE setting LITHOSD_NAME (LITHOS_X=V, a
  # client variable, is set as it is).
  for sc in ${MATRIX_SCENARIOS:-hybrid-stacking}; do
    tag=$(basename "$sc" .toml)
    stamp "matrix $tag"
    base=$OUT/matrix-$tag-alone
    timeout -s KILL 240 "$LITHOS" bench "$sc" --modes alone --out "$base" --no-plots -q | grep -E "^alone"
    for r in $(seq 1 "${MATRIX_ROUNDS:-2}"); do
      n=0
      for entry in ${MATRIX_ENTRIES:-this base}; do
        n=$((n + 1))
        who=${entry%%:*}; sets=""; [[ $entry == *:* ]] && sets=${entry#*:}
        bin=$LITHOS; [[ $who == base ]] && bin=${HPCOST_BASELINE:?matrix: base needs HPCOST_BASELINE}/bin/lithos
        vars=(); IFS=, read -ra pairs <<<"$sets"
        for p in "${pairs[@]}"; do
          [[ -z $p ]] && continue
          name=${p%%=*}
          if [[ $name == LITHOS_* ]]; then vars+=("$p"); else vars+=("LITHOSD_${name^^}=${p#*=}"); fi
        done
        dir=$OUT/matrix-$tag-$r-$n
        mkdir -p "$dir/runs" && cp "$base"/runs/alone-*.json "$dir/runs/"
        env "${vars[@]}" timeout -s KILL 200 "$bin" bench "$sc" --modes lithos --out "$dir" --no-plots -q |
          grep -E "^lithos" | sed "s/^/$entry ($("$bin" --version | grep -oE '\([0-9a-f-]+(-dirty)?\)'), round $r)  /"
        grep -h "lithosd: CPU" "$dir"/logs/lithos/lithosd.log 2>/dev/null | sed "s/^/$entry  /"
        pack_logs "$dir"
      done
    done
    pack_logs "$base"
  done
fi

if has ahead; then
  for sc in ${AHEAD_SCENARIOS:-solo-training hybrid-stacking}; do
    stamp "ahead $sc"
    base=$OUT/ahead-$sc-alone
    timeout -s KILL 200 "$LITHOS" bench "$sc" --modes alone --out "$base" --no-plots -q | grep -E "^alone"
    n=0
    for v in ${AHEAD_VALUES:-0 1 0 1}; do
      n=$((n + 1)); dir=$OUT/ahead-$sc-$v-$n
      rm -rf "$dir"; mkdir -p "$dir/runs" && cp "$base"/runs/alone-*.json "$dir/runs/"
      # solo-training: every launch waits for its grant, as beside a service.
      free=true; [[ $sc == solo-training ]] && free=false
      LITHOSD_BEST_EFFORT_RUNS_FREE=$free LITHOS_SUBMIT_AHEAD=$v timeout -s KILL 150 "$LITHOS" bench "$sc" \
        --modes lithos --out "$dir" --no-plots -q | grep -E "^lithos" | sed "s/^/submit_ahead=$v  /"
      grep -rhoE '"submit_ahead":\{[^}]*\}' "$dir"/logs 2>/dev/null | sort | uniq -c | sed "s/^/submit_ahead=$v  /"
      grep -h "CPU" "$dir"/logs/lithos/lithosd.log 2>/dev/null | sed "s/^/submit_ahead=$v  /"
      pack_logs "$dir"
    done
    pack_logs "$base"
  done
fi

if has pipeline; then
  declare -A pipe_alone=()
  n=0
  for run in ${PIPE_RUNS:-solo-training:best_effort_runs_free=false hybrid-stacking}; do
    n=$((n + 1)); sc=${run%%:*}; sets=""; [[ $run == *:* ]] && sets=${run#*:}
    stamp "pipeline $run"
    base=$OUT/pipe-$sc-alone
    if [[ -z ${pipe_alone[$sc]:-} ]]; then
      timeout -s KILL 240 "$LITHOS" bench "$sc" --modes alone --out "$base" --no-plots -q | grep -E "^alone"
      pipe_alone[$sc]=1; pack_logs "$base"
    fi
    dir=$OUT/pipe-$sc-$n
    rm -rf "$dir"; mkdir -p "$dir/runs" && cp "$base"/runs/alone-*.json "$dir/runs/"
    envs=(); IFS=, read -ra kv <<<"$sets"
    for e in "${kv[@]}"; do
      [[ -z $e ]] && continue
      if [[ $e == LITHOS_* ]]; then envs+=("$e"); else envs+=("LITHOSD_$(echo "${e%%=*}" | tr a-z A-Z)=${e#*=}"); fi
    done
    env "${envs[@]}" LITHOSD_TRACE="$WORK/pipe.jsonl" LITHOS_STATS_FILE="$dir/stats-%p.json" timeout -s KILL 240 \
      "$LITHOS" bench "$sc" --modes lithos --out "$dir" --no-plots -q | grep -E "^lithos" | sed "s/^/[$run]  /"
    # What drained the trainer's deferred-launch queue (its client statistics).
    python3 - "$dir" <<'PY' | sed "s/^/[$run]  /"
import glob, json, sys
best = None
for f in glob.glob(sys.argv[1] + "/stats-*.json"):
    try:
        d = (json.load(open(f)).get("daemon") or {}).get("deferred") or {}
    except ValueError:
        continue
    if best is None or d.get("deferred", 0) > best.get("deferred", 0):
        best = d
if best:
    by = sorted((best.get("drained_by") or {}).items(), key=lambda kv: -kv[1]["wait_us"])
    print(f"deferred {best.get('deferred')}, in place {best.get('in_place')}, drains {best.get('drains')}, "
          f"drain wait {best.get('drain_wait_us', 0) / 1e3:.0f} ms, full waits {best.get('full_waits')}")
    for k, v in by[:10]:
        print(f"  drained by {k}: {v['n']} times, {v['wait_us'] / 1e3:.1f} ms")
else:
    print("no client statistics")
PY
    python3 scripts/daemon/pipeline_gaps.py "$WORK/pipe.jsonl" --tenant "${PIPE_TENANT:-train}" | sed "s/^/[$run]  /"
    python3 scripts/daemon/pipeline_gaps.py "$WORK/pipe.jsonl" --tenant "${PIPE_TENANT:-train}" --json >"$dir/pipeline_gaps.json"
    [[ -n ${PIPE_KEEP_TRACE:-} ]] && gzip -c "$WORK/pipe.jsonl" >"$dir/trace.jsonl.gz"
    rm -f "$WORK/pipe.jsonl"
    pack_logs "$dir"
  done
fi

if has solo; then
  stamp "solo"
  for sc in solo-training solo-service; do
    timeout -s KILL 250 "$LITHOS" bench "$sc" --modes alone,lithos --out "$OUT/$sc" --no-plots -q | grep -E "^(mode|alone|lithos)"
    pack_logs "$OUT/$sc"
  done
fi
if has stack; then
  stamp "stack"
  timeout -s KILL 580 "$LITHOS" bench inference-stacking --modes "${STACK_MODES:-alone,mps,static-partition,lithos}" \
    --out "$OUT/stack" --no-plots -q | grep -vE "^(report:|$)"
  grep -h "lithosd: CPU" "$OUT"/stack/logs/lithos/lithosd.log 2>/dev/null
  pack_logs "$OUT/stack"
fi
if has hol; then
  stamp "hol"
  timeout -s KILL 400 "$LITHOS" bench head-of-line-steal --modes "${HOL_MODES:-alone,mps,lithos}" \
    --out "$OUT/hol" --no-plots -q | grep -vE "^(report:|$)"
  pack_logs "$OUT/hol"
fi
if has load; then
  for load in ${LOADS:-0.2 0.8}; do
    stamp "load $load"
    sed "s/^load = 0.5$/load = $load/; s/50% load/${load} load/" scenarios/bench/hybrid-stacking.toml \
      >"$WORK/hybrid-load-$load.toml"
    timeout -s KILL 280 "$LITHOS" bench "$WORK/hybrid-load-$load.toml" --modes alone,lithos --out "$OUT/load-$load" \
      --no-plots -q | grep -E "^(mode|alone|lithos)"
    pack_logs "$OUT/load-$load"
  done
fi
if has trace; then
  stamp "trace"
  dir=$OUT/trace-hybrid
  mkdir -p "$dir/runs"
  cp "$OUT"/bench-hybrid/runs/alone-*.json "$dir/runs/" 2>/dev/null
  LITHOSD_TRACE=$WORK/trace.jsonl timeout -s KILL 200 "$LITHOS" bench hybrid-stacking --modes lithos --out "$dir" \
    --no-plots -q | grep -E "^lithos"
  echo "trace: $(wc -l <"$WORK/trace.jsonl") lines, $(du -h "$WORK/trace.jsonl" | cut -f1)"
  head -c 600 "$WORK/trace.jsonl"; echo
  timeout -s KILL 120 "$LITHOS" daemon --replay "$WORK/trace.jsonl"
  echo "replay exit $?"
  # The simulator recalibrated from the run: the trace as a scenario, then
  # simulated under the policies the hardware ran and the baselines.
  timeout -s KILL 120 "$LITHOS" daemon --scenario-from-trace "$WORK/trace.jsonl" --scenario-out "$OUT/trace-scenario"
  timeout -s KILL 240 "$LITHOS" sim --scenario "$OUT/trace-scenario/scenario.toml" \
    --policy lithos,mps,static-partition --json >"$OUT/trace-scenario/sim.json" 2>"$WORK/trace-sim.err"
  echo "sim of the trace: exit $?"
  timeout -s KILL 240 "$LITHOS" sim --scenario "$OUT/trace-scenario/scenario.toml" --policy lithos,mps,static-partition \
    2>/dev/null | sed -n '1,40p'
  tar -czf "$OUT/trace-scenario.tar.gz" -C "$OUT" trace-scenario && rm -rf "$OUT/trace-scenario"
  rm -f "$WORK/trace.jsonl"
  pack_logs "$dir"
fi
[[ -d $OUT/bench-hybrid ]] && pack_logs "$OUT/bench-hybrid"
# Everything but the log archives as one file (the device returns few files).
(cd "$OUT" && find . -name '*.json' -o -name 'report.md' | tar -czf results.tar.gz -T - 2>/dev/null)
stamp "done"
