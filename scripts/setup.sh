#!/usr/bin/env bash
# Install everything fabric needs, idempotently; a second run with all present
# only checks (about a second).
#   Debian packages: Mininet, Open vSwitch and the network tools.
#   .venv: a virtual environment that sees the system's Mininet
#          (--system-site-packages), with fabric and its Python deps.
# --ns3 also installs the simulation backend's packages (ns-3's libraries and headers,
# g++: `--backend ns3` builds its simulator on first use).
set -euo pipefail
cd "$(dirname "$0")/.."

# iperf (2): the Mininet CLI's iperf command runs it. clang and the kernel headers build the
# switches' ECN marker (a BPF filter, fabric/emulation/ecn_marker.bpf.c) and the flow-control
# accounting (XDP, fabric/emulation/pfc.bpf.c), which libbpf loads; clang and the C library's
# headers the library preloaded into ovs-vswitchd (fabric/emulation/idle_accept.c).
APT_PACKAGES=(mininet openvswitch-switch iperf3 iperf ethtool iputils-ping tcpdump iproute2
              python3-venv python3-pip clang linux-libc-dev libc6-dev libbpf1)
NS3_PACKAGES=(libns3-dev g++)
if [[ "${1:-}" == --ns3 ]]; then
  APT_PACKAGES+=("${NS3_PACKAGES[@]}")
  shift
fi
if (($#)); then
  echo "setup: unknown argument $1 (the only option is --ns3)" >&2
  exit 2
fi
SYS_PYTHON=/usr/bin/python3
VENV=.venv

# tcmalloc serves ovs-vswitchd's allocations (fabric/emulation/ovs.py); Ubuntu 24.04 renamed
# its package for the 64-bit time_t transition.
TCMALLOC_PACKAGES=(libtcmalloc-minimal4 libtcmalloc-minimal4t64)

installed() { [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done
need_tcmalloc=1
for pkg in "${TCMALLOC_PACKAGES[@]}"; do
  if installed "$pkg"; then need_tcmalloc=0; fi
done
if [[ $EUID -ne 0 ]] && ((need_tcmalloc)); then
  # optional: the unit tests run without it, and so does ovs-vswitchd (more slowly)
  echo "setup: tcmalloc (${TCMALLOC_PACKAGES[0]}) is not installed; run as root to add it" >&2
  need_tcmalloc=0
fi
if ((${#missing[@]} || need_tcmalloc)); then
  if [[ $EUID -ne 0 ]]; then
    echo "setup: missing Debian packages ${missing[*]}; run as root (sudo) to install them" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  if ((need_tcmalloc)); then
    for pkg in "${TCMALLOC_PACKAGES[@]}"; do
      policy=$(apt-cache policy "$pkg" 2>/dev/null || true)  # no pipe: grep -q + pipefail
      if [[ "$policy" == *"Candidate: "[0-9]* ]]; then
        missing+=("$pkg")
        break
      fi
    done
  fi
  if ((need_tcmalloc)) && [[ " ${missing[*]} " != *" libtcmalloc"* ]]; then
    echo "setup: no tcmalloc package here; ovs-vswitchd will allocate with glibc" >&2
  fi
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

if ! "$VENV/bin/python" -c "import mininet.net" 2>/dev/null; then
  echo "setup: creating $VENV (sees the system's Mininet)"
  rm -rf "$VENV"
  "$SYS_PYTHON" -m venv --system-site-packages "$VENV"
fi

# Reinstall only when the package definition changed.
stamp="$VENV/.fabric-installed"
want=$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "setup: installing fabric and its Python dependencies into $VENV"
  # (the filter hides warnings about local mirrors some machines configure)
  # the distribution was called "fabric" (the SSH library's name) before fabric-emulator
  "$VENV/bin/python" -m pip uninstall -q -y --disable-pip-version-check fabric \
    >/dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  # Chakra traces: only mlc-chakra's schema module is read; its declared dependencies
  # (HolisticTraceAnalysis, jupyterlab, pandas, ...) are not needed
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    "mlc-chakra>=1.0,<1.1" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  echo "$want" > "$stamp"
fi

# `sudo fabric ...`: sudo's PATH has no .venv/bin, so a small command in /usr/local/bin runs
# the fabric of the checkout the current directory is in (several checkouts stay apart).
COMMAND=/usr/local/bin/fabric
if [[ $EUID -eq 0 ]] && ! cmp -s scripts/fabric-command "$COMMAND"; then
  install -m 0755 scripts/fabric-command "$COMMAND"
  echo "setup: installed $COMMAND (runs the .venv/bin/fabric of the checkout you are in)"
fi
