#!/usr/bin/env bash
# The shipped systemd units (packaging/*.service), checked without systemd
# running: each unit, with its ExecStart pointing at this build's lithos,
# must pass `systemd-analyze verify` without a word (it exits 0 on unknown
# keys and bad values, so any output fails), and the command line each one
# starts must be one lithos accepts (the daemon's with --print-config, over
# a configuration of its own; lithos-metrics's until it has written its
# file into a folder of its own), and a daemon's LimitNOFILE must fit the
# max_clients it prints. Skipped (77) where
# systemd-analyze is not installed.
#   units_test.sh LITHOS PACKAGING_DIR
set -u
LITHOS=$1
PKG=$2
command -v systemd-analyze >/dev/null 2>&1 || { echo "systemd-analyze is not installed: skipped"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cat >"$T/lithosd.toml" <<TOML
[daemon]
socket = "$T/lithosd.sock"
TOML
fail=0
for unit in "$PKG"/*.service; do
  name=$(basename "$unit")
  sed "s#/usr/local/bin/lithos#$LITHOS#g; s#/etc/lithos/lithosd.toml#$T/lithosd.toml#g;
       s#/var/lib/prometheus/node-exporter/lithos.prom#$T/lithos.prom#g" "$unit" >"$T/$name"
  target=$T/$name
  if [[ $name == *@.service ]]; then  # a template: verify its instance 0
    target=$T/${name/@/@0}
    cp "$T/$name" "$target"
  fi
  out=$(systemd-analyze verify "$target" 2>&1)
  if [[ $? != 0 || -n $out ]]; then
    echo "FAIL $name: systemd-analyze verify says:"; echo "$out"; fail=1
  else
    echo "ok   $name: systemd-analyze verify"
  fi
  # The command it starts (%i: instance 0).
  cmd=$(sed -n 's/^ExecStart=//p' "$target" | sed 's/%i/0/g')
  [[ -n $cmd ]] || { echo "FAIL $name: no ExecStart"; fail=1; continue; }
  read -r -a argv <<<"$cmd"
  if [[ ${argv[1]} == daemon ]]; then
    out=$("${argv[@]}" --print-config 2>&1)
    rc=$?
  else
    # lithos-metrics: it runs until stopped, writing its file at once (no
    # daemon answers here: lithos_up 0). Stopped by SIGTERM once the file is
    # there (waited for up to 60 s: a loaded machine may be slow to start
    # it), as systemd stops it; an option lithos does not know ends it at
    # once, with its own status.
    rm -f "$T/lithos.prom"
    "${argv[@]}" >"$T/metrics.log" 2>&1 &
    pid=$!
    for ((i = 0; i < 600; ++i)); do
      grep -q '^lithos_up 0' "$T/lithos.prom" 2>/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    running=0
    kill -0 "$pid" 2>/dev/null && running=1
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    out=$(cat "$T/metrics.log")
    if ((running)) && grep -q '^lithos_up 0' "$T/lithos.prom" 2>/dev/null; then
      rc=0
    elif ((running)); then
      rc=1; out="it ran for 60 s, but wrote no lithos_up line to its --out file"
    fi
  fi
  if [[ $rc != 0 ]]; then
    echo "FAIL $name: '$cmd' is not a command lithos accepts (exit $rc):"; echo "$out" | head -n 5; fail=1
  else
    echo "ok   $name: its command line parses"
  fi
  # A daemon's unit gives it descriptors for max_clients (one each) and the
  # ~300 it keeps of its own (docs/daemon.md, "Hostile clients").
  if [[ ${argv[1]} == daemon && $rc == 0 ]]; then
    limit=$(sed -n 's/^LimitNOFILE=//p' "$target")
    clients=$(printf '%s\n' "$out" | grep -o '"max_clients":[0-9]*' | head -n 1 | cut -d: -f2)
    if [[ -z $limit || -z $clients || $limit -lt $((clients + 288)) ]]; then
      echo "FAIL $name: LimitNOFILE=${limit:-(none)} does not fit max_clients ${clients:-?} (+288)"; fail=1
    else
      echo "ok   $name: LimitNOFILE=$limit fits max_clients $clients"
    fi
  fi
done
exit $fail
