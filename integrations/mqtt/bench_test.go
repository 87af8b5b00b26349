package kdbmqtt_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
	"github.com/kdb-project/kdb/integrations/mqtt/internal/brokerconf"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/hooks/storage/pebble"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.etcd.io/bbolt"
)

// brokerKind is one broker configuration of the comparison: the same mochi
// server (internal/brokerconf) with one storage hook and setting.
type brokerKind struct {
	name    string
	durable bool // a PUBACK waits for the hook's write to be fsynced
	hook    string
	sync    bool
}

var brokerKinds = []brokerKind{
	{name: "kdb", durable: true, hook: "kdb"},                        // default: every ack waits for its fsync
	{name: "pebble-sync", durable: true, hook: "pebble", sync: true}, // pebble's durable setting (Mode "Sync")
	{name: "bolt", durable: true, hook: "bolt"},                      // bolt's default: every bbolt transaction fsynced
	{name: "pebble", durable: false, hook: "pebble"},                 // pebble's default (Mode "NoSync")
}

func (k brokerKind) start(tb testing.TB, dir string) *proc {
	tb.Helper()
	if k.hook == "kdb" {
		args := []string{"-store", dir}
		if f := os.Getenv("KDB_MQTT_CPUPROFILE"); f != "" {
			args = append(args, "-cpuprofile", f) // written at the clean stop
		}
		return startBroker(tb, buildBin(tb, "./cmd/kdb-mqtt"), args...)
	}
	args := []string{"-hook", k.hook, "-store", dir}
	if k.sync {
		args = append(args, "-sync")
	}
	return startBroker(tb, buildBin(tb, "./internal/peerbroker"), args...)
}

// BenchmarkMQTT compares kdb-mqtt with the same broker on mochi's pebble
// and bolt hooks, in one run:
//
//   - publish/hook=H/pubs=P: QoS 1 publishes of 1 KiB from P publishers, each
//     waiting for its PUBACK before the next, to a topic an online persistent
//     session (clean start off, session expiry 1 h) subscribes to with QoS 1,
//     so that every message is stored for it until it acks; msgs/s is
//     acknowledged publishes per second.
//   - restart: with 100,000 retained messages and 10,000 persistent
//     sessions (each with a subscription) stored, the time from starting the
//     broker process after a kill -9 to the first CONNACK (H-restart-ms for
//     hook H; each iteration restarts every hook once, in turn).
//
// Durability: see brokerKinds and the README.
//
//	go test -run '^$' -bench BenchmarkMQTT -benchtime 5s -count 3
func BenchmarkMQTT(b *testing.B) {
	for _, k := range brokerKinds {
		for _, pubs := range []int{1, 16} {
			b.Run(fmt.Sprintf("publish/hook=%s/pubs=%d", k.name, pubs), func(b *testing.B) { benchPublish(b, k, pubs) })
		}
	}
	var restartKinds []brokerKind
	for _, k := range brokerKinds {
		if k.name != "pebble-sync" { // the same files as pebble: loading does not depend on the sync mode
			restartKinds = append(restartKinds, k)
		}
	}
	b.Run("restart", func(b *testing.B) { benchRestart(b, restartKinds) })
}

func benchPublish(b *testing.B, k brokerKind, pubs int) {
	p := k.start(b, b.TempDir())
	sub := mustDial(b, p.addr, connOpts{id: "bench-sub", cleanStart: true, expiry: 3600})
	sub.subscribe(b, 1, "bench/#")
	clients := make([]*client, pubs)
	for i := range clients {
		clients[i] = mustDial(b, p.addr, connOpts{id: fmt.Sprintf("bench-pub-%d", i), cleanStart: true})
	}
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	b.ResetTimer()
	cpu0 := procCPU(p.cmd.Process.Pid)
	start := time.Now()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	for i, c := range clients {
		n := b.N / pubs
		if i < b.N%pubs {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			topic := "bench/" + strconv.Itoa(i)
			for range n {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := c.publish(ctx, topic, 1, false, payload)
				cancel()
				if err != nil {
					errMu.Lock()
					firstErr = err
					errMu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	if cpu1 := procCPU(p.cmd.Process.Pid); cpu0 >= 0 && cpu1 >= cpu0 {
		// The broker process's CPU time (user and system) per message:
		// what the machine's other load does not change much.
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "broker-cpu-us/msg")
	}
	b.ReportMetric(0, "ns/op")
	for _, c := range clients {
		c.close()
	}
	sub.close()
	p.stop(b)
}

const (
	restartRetained = 100_000
	restartSessions = 10_000
)

var (
	templMu sync.Mutex
	templ   = map[string]string{}
)

func benchRestart(b *testing.B, kinds []brokerKind) {
	dirs := make([]string, len(kinds))
	for j, k := range kinds {
		dirs[j] = populated(b, k)
	}
	totals := make([]time.Duration, len(kinds))
	hookLoad := make([]time.Duration, len(kinds))
	serve := make([]time.Duration, len(kinds))
	for i := 0; i < b.N; i++ {
		// Each hook once per iteration, the order rotated: side by side
		// under the same load.
		for r := range kinds {
			j := (i + r) % len(kinds)
			k := kinds[j]
			t0 := time.Now()
			p := k.start(b, dirs[j])
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			c, err := dial(ctx, p.addr, connOpts{id: "restart-probe", cleanStart: true})
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			totals[j] += time.Since(t0)
			hl, sv, err := loadTimes(p.log.String())
			if err != nil {
				b.Fatal(err)
			}
			hookLoad[j] += hl
			serve[j] += sv
			if i == 0 {
				checkLoaded(b, p.addr)
			}
			c.close()
			p.kill()
		}
	}
	for j, k := range kinds {
		b.ReportMetric(float64(totals[j].Milliseconds())/float64(b.N), k.name+"-restart-ms")
		b.ReportMetric(float64(hookLoad[j].Milliseconds())/float64(b.N), k.name+"-hook-load-ms")
		b.ReportMetric(float64((serve[j]-hookLoad[j]).Milliseconds())/float64(b.N), k.name+"-server-load-ms")
	}
	b.ReportMetric(0, "ns/op")
}

var loadTimesRE = regexp.MustCompile(`store_read_time=(\S+) serve_time=(\S+)`)

// loadTimes returns what a broker's log says of its start (both commands
// wrap their hook in brokerconf.LoadTimer): the time in the hook's Init
// and Stored* calls, and the time from adding the hook to the end of the
// server's Serve, which holds them and the server's own loading of what
// they returned.
func loadTimes(log string) (hook, serve time.Duration, err error) {
	m := loadTimesRE.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return 0, 0, fmt.Errorf("no store_read_time in the broker's log:\n%s", log)
	}
	last := m[len(m)-1]
	if hook, err = time.ParseDuration(last[1]); err == nil {
		serve, err = time.ParseDuration(last[2])
	}
	return hook, serve, err
}

// checkLoaded checks that the restarted broker has the stored state.
func checkLoaded(b *testing.B, addr string) {
	s := mustDial(b, addr, connOpts{id: fmt.Sprintf("session-%d", restartSessions-1), expiry: 3600})
	if !s.connack.SessionPresent {
		b.Fatal("a stored session was not loaded")
	}
	s.close()
	r := mustDial(b, addr, connOpts{id: "restart-reader", cleanStart: true})
	r.subscribe(b, 1, fmt.Sprintf("r/%d", restartRetained-1))
	if len(r.waitQuiet(1, 200*time.Millisecond, 10*time.Second)) != 1 {
		b.Fatal("a stored retained message was not loaded")
	}
	r.close()
}

// populated returns a store of the kind's hook holding restartRetained
// retained messages and restartSessions sessions, written by the hook
// itself (its own events, called in this process) once per test process.
func populated(b testing.TB, k brokerKind) string {
	templMu.Lock()
	defer templMu.Unlock()
	if d, ok := templ[k.hook]; ok {
		return d
	}
	dir := filepath.Join(binDir, "restart-"+k.hook)
	if err := os.MkdirAll(dir, 0o750); err != nil { // bbolt creates its file, not the directory
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := brokerconf.NewServer(log)
	if err != nil {
		b.Fatal(err)
	}
	var h mqtt.Hook
	var closeDB func() error
	switch k.hook {
	case "kdb":
		db, err := kdb.Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		kh := new(kdbmqtt.Hook)
		kh.SetOpts(log, &mqtt.HookOptions{Capabilities: srv.Options.Capabilities})
		if err := kh.Init(&kdbmqtt.Options{DB: db, Server: srv}); err != nil {
			b.Fatal(err)
		}
		h, closeDB = kh, db.Close
	case "pebble":
		ph := new(pebble.Hook)
		ph.SetOpts(log, &mqtt.HookOptions{Capabilities: srv.Options.Capabilities})
		if err := ph.Init(&pebble.Options{Path: filepath.Join(dir, "pebble"), Mode: pebble.NoSync}); err != nil {
			b.Fatal(err)
		}
		h = ph
	case "bolt":
		bh := new(bolt.Hook)
		bh.SetOpts(log, &mqtt.HookOptions{Capabilities: srv.Options.Capabilities})
		// Not fsynced while it is filled (the files are read back on this
		// machine, never after a power loss).
		if err := bh.Init(&bolt.Options{Path: filepath.Join(dir, "bolt.db"), Options: &bbolt.Options{Timeout: 250 * time.Millisecond, NoSync: true, NoFreelistSync: true}}); err != nil {
			b.Fatal(err)
		}
		h = bh
	}
	start := time.Now()
	var wg sync.WaitGroup
	const workers = 16
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < restartSessions; i += workers {
				cl := srv.NewClient(nil, "tcp", fmt.Sprintf("session-%d", i), false)
				cl.Properties.ProtocolVersion = 5
				cl.Properties.Props.SessionExpiryInterval = 3600
				cl.Properties.Props.SessionExpiryIntervalFlag = true
				h.OnSessionEstablish(cl, packets.Packet{})
				h.OnSessionEstablished(cl, packets.Packet{})
				h.OnSubscribed(cl, packets.Packet{Filters: packets.Subscriptions{{Filter: fmt.Sprintf("s/%d/#", i), Qos: 1}}}, []byte{1})
			}
			pub := srv.NewClient(nil, "tcp", fmt.Sprintf("retainer-%d", w), false)
			payload := make([]byte, 64)
			for i := w; i < restartRetained; i += workers {
				pk := packets.Packet{
					FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
					TopicName:   fmt.Sprintf("r/%d", i),
					Payload:     payload,
					Created:     time.Now().Unix(),
				}
				srv.Topics.RetainMessage(pk.Copy(false)) // mochi's update before the event: the hook stores the server's retained message
				h.OnRetainMessage(pub, pk, 1)
			}
		}()
	}
	wg.Wait()
	if err := h.Stop(); err != nil {
		b.Fatal(err)
	}
	if closeDB != nil {
		if err := closeDB(); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%s: stored %d retained messages and %d sessions in %v", k.hook, restartRetained, restartSessions, time.Since(start))
	templ[k.hook] = dir
	return dir
}

// procCPU returns the user and system CPU time of process pid so far
// (Linux: /proc/PID/stat), or -1.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name (in parentheses, which may hold
	// spaces): state is field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}
