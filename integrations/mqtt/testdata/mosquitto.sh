#!/usr/bin/env bash
# kdb-mqtt with Debian's mosquitto-clients (a second, independent MQTT
# implementation): retained messages and one persistent subscriber survive
# a SIGKILL of the broker. Run by TestMosquittoClients (mosquitto_test.go):
#   KDB_MQTT_BIN=path/to/kdb-mqtt WORK=dir bash testdata/mosquitto.sh
set -euo pipefail
: "${KDB_MQTT_BIN:?}" "${WORK:?}"
N=${N:-20}
store="$WORK/store"
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; }
trap cleanup EXIT

start() {
  : >"$WORK/broker.log"
  "$KDB_MQTT_BIN" -store "$store" -listen 127.0.0.1:0 2>>"$WORK/broker.log" &
  pid=$!
  for _ in $(seq 1 300); do
    addr=$(sed -n 's/.*msg="kdb-mqtt: listening" address=\([^ ]*\).*/\1/p' "$WORK/broker.log")
    if [ -n "$addr" ]; then port=${addr##*:}; return 0; fi
    kill -0 "$pid" 2>/dev/null || { cat "$WORK/broker.log"; echo "broker exited" >&2; exit 1; }
    sleep 0.05
  done
  echo "broker did not start" >&2; exit 1
}
fail() { echo "FAIL: $*" >&2; echo "--- broker log"; cat "$WORK/broker.log"; exit 1; }

# libmosquitto's default Receive Maximum is 20 (sent in its CONNECT), and
# mochi resends every stored inflight message at a session's reconnect
# without regard to it (Client.ResendInflightMessages): with more than 20
# queued QoS 2 messages (each holds a slot until its PUBREL) libmosquitto
# gets a PUBLISH with no slot left and reports "a network protocol error"
# (handle__publish: MOSQ_ERR_PROTOCOL). Not a storage matter: it happens
# without a restart too. The subscriber allows more.
RECVMAX="-D connect receive-maximum 1000"

start
# The persistent subscriber: clean session off, session expiry 1 h; it
# subscribes, receives one message and leaves. (The one message is for a
# mochi-mqtt bug, not a storage one: mochi refuses a SUBSCRIBE whose packet
# ID equals one of the server's inflight packet IDs for that client (SUBACK
# 0x91), and mosquitto_sub, which subscribes again at each connect with
# packet ID 1, then disconnects. With the first server packet ID taken by
# the message received now, those queued below get IDs 2, 3, ...)
# It stays connected for 2 s, so that its PUBACK is sent well before it
# leaves.
ok=""
for _ in $(seq 1 5); do
  mosquitto_sub -h 127.0.0.1 -p "$port" -V mqttv5 -i mosq-sub -c -x 3600 -q 2 -t 'ms/#' -W 2 $RECVMAX >"$WORK/warm.txt" 2>&1 &
  subpid=$!
  sleep 0.5
  mosquitto_pub -h 127.0.0.1 -p "$port" -V mqttv5 -q 1 -t ms/warm-up -m warm-up
  wait "$subpid" || true
  if grep -qx warm-up "$WORK/warm.txt"; then ok=1; break; fi
done
[ -n "$ok" ] || fail "the persistent subscriber did not get its first message"
for i in $(seq 1 "$N"); do
  mosquitto_pub -h 127.0.0.1 -p "$port" -V mqttv5 -q 1 -r -t "mr/$i" -m "retained-$i" || fail "publish mr/$i"
  mosquitto_pub -h 127.0.0.1 -p "$port" -V mqttv5 -q 1 -t "ms/q1/$i" -m "q1-$i" || fail "publish ms/q1/$i"
  mosquitto_pub -h 127.0.0.1 -p "$port" -V mqttv5 -q 2 -t "ms/q2/$i" -m "q2-$i" || fail "publish ms/q2/$i"
done
# Every publish above returned after its PUBACK / PUBCOMP. Now kill -9.
kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=""
start

# Retained messages, read by a fresh MQTT 3.1.1 client.
mosquitto_sub -h 127.0.0.1 -p "$port" -t 'mr/#' -v -C "$N" -W 10 >"$WORK/retained.txt" || fail "retained: $(wc -l <"$WORK/retained.txt") of $N"
for i in $(seq 1 "$N"); do
  grep -qx "mr/$i retained-$i" "$WORK/retained.txt" || fail "retained mr/$i missing"
done

# The persistent subscriber (QoS 2 subscription) comes back (no clean
# start) and gets what was published while it was away: each QoS 1 message
# at least once, each QoS 2 message exactly once.
mosquitto_sub -h 127.0.0.1 -p "$port" -V mqttv5 -i mosq-sub -c -x 3600 -q 2 -t 'ms/#' -v -W 5 $RECVMAX >"$WORK/session.txt" 2>&1 || true
for i in $(seq 1 "$N"); do
  grep -qx "ms/q1/$i q1-$i" "$WORK/session.txt" || fail "persistent session: ms/q1/$i missing: $(cat "$WORK/session.txt")"
  n=$(grep -cx "ms/q2/$i q2-$i" "$WORK/session.txt" || true)
  [ "$n" = 1 ] || fail "persistent session: ms/q2/$i delivered $n times, want exactly once: $(cat "$WORK/session.txt")"
done
if grep -qi error "$WORK/session.txt"; then fail "mosquitto_sub: $(grep -i error "$WORK/session.txt")"; fi

kill -TERM "$pid"; wait "$pid" || fail "broker exit status $? on SIGTERM"; pid=""
grep -q 'msg="kdb-mqtt: stopped"' "$WORK/broker.log" || fail "no clean stop"
echo "mosquitto-clients: $N retained messages, and $N QoS 1 and $N QoS 2 publishes to a persistent session, survived kill -9"
