package kdbmqtt_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/kdb-project/kdb/vfs"
)

// The in-process brokers (startInProc) open their store with 1 MiB
// segments: kdb's MaxBatchSize is then 256 KiB, its bound on one commit
// 512 KiB, and the hook takes message records up to about 191 KiB (256 KiB
// less room for a subscriber's copy).
const (
	tooLarge = 220_000 // a message over the hook's limit on these stores
	large    = 100_000 // under it: one copy fits a commit, six do not
)

// TestHook_OversizedMessageRefusedAlone: a message too large for the store
// is refused for its publisher only (MQTT 5 QoS 1: PUBACK 0x97, still
// connected; QoS 0 retained: disconnected), the hook does not fail, and
// every other client's writes are stored and acknowledged as before: a
// persistent session's subscription acknowledged after them is there after
// a restart.
func TestHook_OversizedMessageRefusedAlone(t *testing.T) {
	fs := vfs.NewMem()
	b := startInProc(t, fs, "store")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := bytes.Repeat([]byte("x"), tooLarge)

	pub := mustDial(t, b.addr, connOpts{id: "big-pub", cleanStart: true})
	pr, err := pub.c.Publish(ctx, &paho.Publish{Topic: "big/1", QoS: 1, Payload: big})
	if pr == nil || pr.ReasonCode != 0x97 {
		t.Errorf("a QoS 1 message over the store's limit: %+v, %v; want a PUBACK with reason 0x97", pr, err)
	}
	if err := pub.publish(ctx, "small/1", 1, false, []byte("tiny")); err != nil {
		t.Fatalf("the same publisher's next (small) message after the refusal: %v", err)
	}

	ret := mustDial(t, b.addr, connOpts{id: "big-retainer", cleanStart: true})
	if err := ret.publish(ctx, "big/retained", 0, true, big); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ret.c.Done():
	case <-time.After(10 * time.Second):
		t.Error("a QoS 0 retained message over the store's limit: the publisher was not disconnected")
	}

	other := mustDial(t, b.addr, connOpts{id: "other-pub", cleanStart: true})
	if err := other.publish(ctx, "small/2", 1, true, []byte("kept")); err != nil {
		t.Fatalf("another client's QoS 1 message after the refusals: %v", err)
	}
	s := mustDial(t, b.addr, connOpts{id: "newsub", cleanStart: true, expiry: 3600})
	s.subscribe(t, 1, "n/#")
	s.close()
	if err := b.hook.Err(); err != nil {
		t.Fatalf("the hook failed: %v", err)
	}
	pub.close()
	other.close()
	b.close(t)

	rb := startInProc(t, fs, "store")
	c := mustDial(t, rb.addr, connOpts{id: "newsub", expiry: 3600})
	if !c.connack.SessionPresent {
		t.Fatal("the session whose SUBACK was sent after the refusal is gone after a restart")
	}
	p := mustDial(t, rb.addr, connOpts{id: "p2", cleanStart: true})
	if err := p.publish(ctx, "n/x", 1, false, []byte("for-newsub")); err != nil {
		t.Fatal(err)
	}
	if n := countPayloads(c.waitQuiet(1, 300*time.Millisecond, 10*time.Second))["for-newsub"]; n != 1 {
		t.Errorf("the session got the message for its subscription %d times, want 1", n)
	}
	r := mustDial(t, rb.addr, connOpts{id: "reader", cleanStart: true})
	r.subscribe(t, 1, "#")
	got := countPayloads(r.waitQuiet(1, 300*time.Millisecond, 10*time.Second))
	if got["kept"] != 1 || got[string(big)] != 0 {
		t.Errorf("retained after the restart: kept %d (want 1), the refused message %d (want 0)", got["kept"], got[string(big)])
	}
}

// TestHook_StoreFailureRefusesEveryAck: once the store fails (writes and
// fsyncs return errors), no acknowledgement that depends on a write is
// sent: not the CONNACK of a persistent session, not a SUBACK, not a
// PUBACK; and the hook reports the failure (Err, Stop).
func TestHook_StoreFailureRefusesEveryAck(t *testing.T) {
	var broken atomic.Bool
	errDisk := errors.New("injected I/O error")
	fs := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if broken.Load() && (e.Op == vfs.OpWrite || e.Op == vfs.OpSync) {
			return errDisk
		}
		return nil
	})
	b := startInProc(t, fs, "store")
	defer func() {
		// The store is failed: its Close reports it.
		_ = b.srv.Close()
		b.srv = nil
		_ = b.db.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	early := mustDial(t, b.addr, connOpts{id: "early", cleanStart: true, expiry: 3600})

	broken.Store(true)
	// The first write after the failure fails, and with it the hook.
	if c, err := dial(ctx, b.addr, connOpts{id: "first", cleanStart: true, expiry: 3600}); err == nil {
		c.close()
		t.Error("a persistent session got its CONNACK from a broker whose store write failed")
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.hook.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if b.hook.Err() == nil {
		t.Fatal("the hook did not report the store's failure")
	}

	// Every write from now on is refused by the hook itself.
	if c, err := dial(ctx, b.addr, connOpts{id: "late", cleanStart: true, expiry: 3600}); err == nil {
		c.close()
		t.Error("a persistent session got its CONNACK after the store failed")
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if _, err := early.c.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "x/#", QoS: 1}}}); err == nil {
		t.Error("a SUBACK was sent after the store failed")
	}
	pub, err := dial(ctx, b.addr, connOpts{id: "volatile", cleanStart: true})
	if err != nil {
		t.Fatalf("a session that ends with its connection (no write needed for its CONNACK): %v", err)
	}
	defer pub.close()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if err := pub.publish(pctx, "p/1", 1, false, []byte("lost")); err == nil {
		t.Error("a PUBACK was sent after the store failed")
	}
	if err := b.hook.Stop(); err == nil || !errors.Is(err, errDisk) {
		t.Errorf("Stop after the failure: %v, want the store's error", err)
	}
}

// TestHook_LargeFanoutSplit: a message whose copies for its subscribers
// take more than one commit can hold (6 persistent sessions, 100 KB:
// 600 KB, over kdb's 512 KiB bound here) is stored in several commits; the
// hook does not fail, nothing stays pending, and each session gets the
// message once, before and after a restart.
func TestHook_LargeFanoutSplit(t *testing.T) {
	fs := vfs.NewMem()
	b := startInProc(t, fs, "store")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const subs = 6
	ids := make([]string, subs)
	for i := range ids {
		ids[i] = "fan" + string(rune('a'+i))
		c := mustDial(t, b.addr, connOpts{id: ids[i], cleanStart: true, expiry: 3600})
		c.subscribe(t, 1, "fan/#")
		c.close()
	}
	msg := bytes.Repeat([]byte("m"), large)
	pub := mustDial(t, b.addr, connOpts{id: "fan-pub", cleanStart: true})
	if err := pub.publish(ctx, "fan/x", 1, false, msg); err != nil {
		t.Fatal(err)
	}
	if err := pub.publish(ctx, "other", 1, false, []byte("after")); err != nil {
		t.Fatalf("a message after the large fan-out: %v", err)
	}
	pub.close()
	time.Sleep(100 * time.Millisecond) // the fan-out's commits applied
	if err := b.hook.Err(); err != nil {
		t.Fatalf("the hook failed: %v", err)
	}
	b.close(t)
	if n := countPending(t, fs); n != 0 {
		t.Errorf("%d pending publishes left after a clean stop, want 0", n)
	}

	rb := startInProc(t, fs, "store")
	for _, id := range ids {
		c := mustDial(t, rb.addr, connOpts{id: id, expiry: 3600})
		if n := countPayloads(c.waitQuiet(1, 300*time.Millisecond, 10*time.Second))[string(msg)]; n != 1 {
			t.Errorf("%s got the large message %d times after the restart, want 1", id, n)
		}
	}
	if err := rb.hook.Err(); err != nil {
		t.Fatalf("the hook failed after the restart: %v", err)
	}
}
