package kdbmqtt_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestRestart_OfflineSessionGetsNewMessages: a persistent session (MQTT 5,
// session expiry 1 h) subscribes with QoS 1 and leaves; the broker stops
// (cleanly, or by a crash: kill -9 or power loss, the old server abandoned
// without Close), restarts on the same store, and QoS 1 messages are
// published from another client as soon as the restarted server serves
// (Serve returned, or kdb-mqtt logged "listening"), before the session
// reconnects. The session must get each of them when it comes back: mochi
// restores the stored clients and subscriptions in Serve (readStore,
// before the listeners start), so a message published then is kept as
// inflight for the offline client and resent at its reconnect.
func TestRestart_OfflineSessionGetsNewMessages(t *testing.T) {
	const n = 20
	topic := func(i int) string { return fmt.Sprintf("rst/%d", i) }

	// subscribeAndLeave connects the persistent session, subscribes and
	// disconnects it.
	subscribeAndLeave := func(t *testing.T, addr string) {
		s := mustDial(t, addr, connOpts{id: "rst-sub", cleanStart: true, expiry: 3600})
		s.subscribe(t, 1, "rst/#")
		s.close()
	}
	// publishThenCollect publishes n QoS 1 messages right away on the
	// restarted broker, then reconnects the session and checks it got
	// every one.
	publishThenCollect := func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pub := mustDial(t, addr, connOpts{id: "rst-pub", cleanStart: true})
		want := make([]string, n)
		for i := range n {
			want[i] = fmt.Sprintf("rst-%d", i)
			if err := pub.publish(ctx, topic(i), 1, false, []byte(want[i])); err != nil {
				t.Fatal(err)
			}
		}
		pub.close()
		s := mustDial(t, addr, connOpts{id: "rst-sub", expiry: 3600})
		if !s.connack.SessionPresent {
			t.Fatal("the persistent session is gone after the restart")
		}
		got := countPayloads(s.waitQuiet(n, 300*time.Millisecond, 15*time.Second))
		var lost []string
		for _, p := range want {
			if got[p] == 0 {
				lost = append(lost, p)
			}
		}
		if len(lost) > 0 {
			t.Errorf("%d of %d QoS 1 messages published after the restart, while the session was offline, not delivered at its reconnect: %v", len(lost), n, head(lost, 10))
		}
	}

	t.Run("clean-stop", func(t *testing.T) {
		dir := t.TempDir()
		b := startInProc(t, nil, dir)
		subscribeAndLeave(t, b.addr)
		b.close(t)
		b = startInProc(t, nil, dir)
		publishThenCollect(t, b.addr)
	})
	// The old server is abandoned without Close; the image of its store
	// is taken first (kill -9: every write kept; power loss: the synced
	// ones only), then the old server is closed only to free its port and
	// goroutines, after the image.
	for _, c := range []struct {
		name string
		keep float64
	}{{"kill", 1}, {"power-loss", 0}} {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			b := startInProc(t, fs, "store")
			subscribeAndLeave(t, b.addr)
			img := fs.CrashClone(vfs.CrashOptions{KeepUnsynced: c.keep})
			b.close(t)
			b = startInProc(t, img, "store")
			publishThenCollect(t, b.addr)
		})
	}
	t.Run("process-kill", func(t *testing.T) {
		bin := buildBin(t, "./cmd/kdb-mqtt")
		dir := t.TempDir()
		p := startBroker(t, bin, "-store", dir)
		subscribeAndLeave(t, p.addr)
		p.kill()
		p = startBroker(t, bin, "-store", dir)
		publishThenCollect(t, p.addr)
		p.stop(t)
	})
}

// TestRestart_ResumeAfterPubackGetsMessage makes the race behind
// TestRestart_OfflineSessionGetsNewMessages's rare failures happen every
// run: mochi writes a publisher's PUBACK before it hands the message to
// the subscribers, and an auth hook here delays that hand-off (its
// OnACLCheck for the delivery, which mochi calls after taking the
// subscriber's client object from its map and before setting the message
// inflight on it) by 500 ms for one topic. The offline session reconnects
// as soon as the PUBACK of that message arrives: without the hook's wait
// (awaitFanouts), mochi resumed the session from the old client object
// before the message was set on it, and the message, acknowledged before
// the CONNECT, was never sent on the new connection. Run after a restart
// (the report) and without one (the race is not the restart's).
func TestRestart_ResumeAfterPubackGetsMessage(t *testing.T) {
	for _, restart := range []bool{true, false} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			dir := t.TempDir()
			slow := &slowDelivery{topic: "rsl/slow", delay: 500 * time.Millisecond}
			b := startInProcAuth(t, dir, slow)
			s := mustDial(t, b.addr, connOpts{id: "rsl-sub", cleanStart: true, expiry: 3600})
			s.subscribe(t, 1, "rsl/#")
			s.close()
			if restart {
				b.close(t)
				b = startInProcAuth(t, dir, slow)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pub := mustDial(t, b.addr, connOpts{id: "rsl-pub", cleanStart: true})
			if err := pub.publish(ctx, "rsl/fast", 1, false, []byte("fast")); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := pub.publish(ctx, "rsl/slow", 1, false, []byte("slow")); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d >= slow.delay/2 {
				// The CONNECT below would come after the hand-off.
				t.Skipf("the PUBACK took %v, too close to the %v the hand-off is delayed: no race", d, slow.delay)
			}
			s = mustDial(t, b.addr, connOpts{id: "rsl-sub", expiry: 3600})
			if !s.connack.SessionPresent {
				t.Fatal("the persistent session is gone")
			}
			got := countPayloads(s.waitQuiet(2, 300*time.Millisecond, 5*time.Second))
			for _, p := range []string{"fast", "slow"} {
				if got[p] == 0 {
					t.Errorf("message %q, acknowledged to its publisher before the session reconnected, not delivered to it", p)
				}
			}
		})
	}
}

// slowDelivery is an allow-all auth hook that delays the delivery check
// of one topic (OnACLCheck with write false, in mochi's publishToClient).
type slowDelivery struct {
	mqtt.HookBase
	topic string
	delay time.Duration
}

func (h *slowDelivery) ID() string { return "slow-delivery" }

func (h *slowDelivery) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

func (h *slowDelivery) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

func (h *slowDelivery) OnACLCheck(_ *mqtt.Client, topic string, write bool) bool {
	if !write && topic == h.topic {
		time.Sleep(h.delay)
	}
	return true
}

// startInProcAuth is startInProc (on the OS file system) with auth in
// place of the allow-all auth hook.
func startInProcAuth(t testing.TB, dir string, auth mqtt.Hook) *inproc {
	t.Helper()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumInflight = 65535
	srv := mqtt.New(&mqtt.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Capabilities: caps})
	if err := srv.AddHook(auth, nil); err != nil {
		t.Fatal(err)
	}
	return serveInProc(t, db, srv)
}

// TestRestart_PublishWhileSessionResumes: a QoS 1 message published to a
// persistent session while the session's connection is being resumed
// (after the hook's OnSessionEstablish, before mochi put the new client
// object in its map) had its fan-out take the old client object, which
// mochi then cloned into the new one before the message was set on it:
// acknowledged to its publisher, it was never sent (an outside tester's
// kill -9 campaign: an online subscriber reconnecting right after each
// restart while publishers published lost the first message of a round).
// A hook after the kdb hook here widens the resume by 300 ms and the
// publish is made in it, its hand-off delayed 500 ms (slowDelivery) so
// that it lands after the clone. The hook now holds such a publish in
// OnPublish until the resume is done (OnSessionEstablished).
func TestRestart_PublishWhileSessionResumes(t *testing.T) {
	slow := &slowDelivery{topic: "rsw/slow", delay: 500 * time.Millisecond}
	b := startInProcAuth(t, t.TempDir(), slow)
	s := mustDial(t, b.addr, connOpts{id: "rsw-sub", cleanStart: true, expiry: 3600})
	s.subscribe(t, 1, "rsw/#")
	s.close()
	pub := mustDial(t, b.addr, connOpts{id: "rsw-pub", cleanStart: true})
	gate := &slowEstablish{id: "rsw-sub", delay: 300 * time.Millisecond, entered: make(chan struct{})}
	if err := b.srv.AddHook(gate, nil); err != nil { // after the kdb hook
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pubErr := make(chan error, 1)
	go func() {
		<-gate.entered
		pubErr <- pub.publish(ctx, "rsw/slow", 1, false, []byte("slow"))
	}()
	s = mustDial(t, b.addr, connOpts{id: "rsw-sub", expiry: 3600})
	if !s.connack.SessionPresent {
		t.Fatal("the persistent session is gone")
	}
	if err := <-pubErr; err != nil {
		t.Fatal(err)
	}
	if got := countPayloads(s.waitQuiet(1, 300*time.Millisecond, 5*time.Second)); got["slow"] == 0 {
		t.Error("a message acknowledged to its publisher while the session was being resumed was not delivered to it")
	}
}

// slowEstablish delays the OnSessionEstablish of client id once, after
// closing entered.
type slowEstablish struct {
	mqtt.HookBase
	id      string
	delay   time.Duration
	entered chan struct{}
	once    sync.Once
}

func (h *slowEstablish) ID() string { return "slow-establish" }

func (h *slowEstablish) Provides(b byte) bool { return b == mqtt.OnSessionEstablish }

func (h *slowEstablish) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	if cl.ID == h.id {
		h.once.Do(func() {
			close(h.entered)
			time.Sleep(h.delay)
		})
	}
}
