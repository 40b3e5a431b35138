#!/usr/bin/env bash
# A cluster of "hosts" on this machine, for the tests and benchmarks of engine replicas on other hosts
# (docs/cluster.md): HOSTS network namespaces NAME-h0 ... each joined by a veth pair to a bridge in a
# switch namespace NAME-s, and a veth from the caller's namespace into that switch, so that a front
# started here reaches every host and the hosts reach each other, across real interfaces. Nothing
# reaches beyond the machine. Needs root.
#
#   scripts/netns_cluster.sh up NAME HOSTS     # prints the /24 prefix P: this namespace is P.1, host i is P.(11+i)
#   scripts/netns_cluster.sh link NAME I up|down   # host I's interface (down: a cut link, no FIN or RST)
#   scripts/netns_cluster.sh down NAME HOSTS   # kills what runs in the namespaces, removes them and the veths
#
# NAME: 3-11 letters and digits (interface names are NAME plus 2 characters, at most 15). The prefix
# is the first 10.247.Y.0/24 that no address or route of this namespace uses. `up` removes an earlier
# cluster of the same NAME first; on a failure it removes what it made and exits non-zero.
set -euo pipefail
cmd="${1:-}" name="${2:-}"
[[ "$name" =~ ^[A-Za-z0-9]{3,11}$ ]] || { echo "netns_cluster.sh: NAME must be 3-11 letters and digits" >&2; exit 2; }

down() {  # HOSTS
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(s|h[0-9]+)$" || true); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "${name}f" 2>/dev/null || true
}

case "$cmd" in
  up)
    hosts="${3:?netns_cluster.sh up NAME HOSTS}"
    [[ "$hosts" =~ ^[1-9]$ ]] || { echo "netns_cluster.sh: HOSTS must be 1-9" >&2; exit 2; }
    [ "$(id -u)" = 0 ] || { echo "netns_cluster.sh: needs root" >&2; exit 1; }
    down
    # Clusters built at the same moment (ctest -j) must not pick the same prefix: one `up` at a time
    # from choosing it to the address that claims it.
    exec 9>/tmp/ajet-netns-cluster.lock
    flock 9
    used="$(ip -o addr; ip route)"
    prefix=""
    for y in $(seq 20 250); do
      if ! grep -q "10\.247\.$y\." <<< "$used"; then prefix="10.247.$y"; break; fi
    done
    [ -n "$prefix" ] || { echo "netns_cluster.sh: no free 10.247.Y.0/24" >&2; exit 1; }
    trap 'down; echo "netns_cluster.sh: could not build the namespaces" >&2' ERR
    sw="$name-s"
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    ip link add "${name}f" type veth peer name "${name}F" netns "$sw"
    ip -n "$sw" link set "${name}F" master br0 up
    ip addr add "$prefix.1/24" dev "${name}f"
    flock -u 9
    ip link set "${name}f" up
    for i in $(seq 0 $(( hosts - 1 ))); do
      ns="$name-h$i"
      ip netns add "$ns"
      ip -n "$ns" link set lo up
      ip link add "${name}h$i" netns "$ns" type veth peer name "${name}H$i" netns "$sw"
      ip -n "$sw" link set "${name}H$i" master br0 up
      ip -n "$ns" addr add "$prefix.$(( 11 + i ))/24" dev "${name}h$i"
      ip -n "$ns" link set "${name}h$i" up
    done
    echo "$prefix"
    ;;
  link)
    i="${3:?netns_cluster.sh link NAME I up|down}" state="${4:?netns_cluster.sh link NAME I up|down}"
    ip -n "$name-h$i" link set "${name}h$i" "$state"
    ;;
  down)
    down
    ;;
  *)
    echo "usage: netns_cluster.sh up NAME HOSTS | link NAME I up|down | down NAME" >&2
    exit 2
    ;;
esac
