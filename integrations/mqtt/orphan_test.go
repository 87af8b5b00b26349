package kdbmqtt_test

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
)

// A session that ends with its connection (clean start, no session
// expiry), connected with a subscription and an unacknowledged QoS 1
// message when kdb-mqtt is killed with -9: at the restart mochi loads the
// session and ends it (its client record is removed) before it loads the
// subscriptions and inflight messages, so nothing removed those. They
// stayed stored for good: mochi put the subscription back in its topic
// tree at every start, and a later client with that ID, which never
// subscribed, got the messages on it. The hook now hands out, and keeps,
// only the subscriptions and inflight messages of a stored session.
func TestRestart_EndedSessionLeavesNothing(t *testing.T) {
	bin := buildBin(t, "./cmd/kdb-mqtt")
	dir := t.TempDir()
	p := startBroker(t, bin, "-store", dir)
	c := mustDial(t, p.addr, connOpts{id: "c", cleanStart: true})
	got := make(chan struct{}, 1)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	c.setOnRecv(func(*paho.Publish) { // never acknowledged
		select {
		case got <- struct{}{}:
		default:
		}
		<-block
	})
	c.subscribe(t, 1, "secret/#")
	pub := mustDial(t, p.addr, connOpts{id: "pub", cleanStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, topic := range []string{"secret/1", "secret/2", "secret/3"} { // packet IDs 1, 2, 3 of c
		if err := pub.publish(ctx, topic, 1, false, []byte("for the old c")); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-got: // the fan-outs are written (each publish's before the next is read)
	case <-ctx.Done():
		t.Fatal("c got nothing")
	}
	// A synced write after it, so that the inflight record is durable.
	if err := pub.publish(ctx, "other", 1, false, []byte("sync")); err != nil {
		t.Fatal(err)
	}
	p.kill()

	p = startBroker(t, bin, "-store", dir)
	c2 := mustDial(t, p.addr, connOpts{id: "c", cleanStart: true})
	c2.subscribe(t, 1, "mark")
	pub = mustDial(t, p.addr, connOpts{id: "pub", cleanStart: true})
	if err := pub.publish(ctx, "secret/4", 1, false, []byte("not for the new c")); err != nil {
		t.Fatal(err)
	}
	if err := pub.publish(ctx, "mark", 1, false, []byte("mark")); err != nil {
		t.Fatal(err)
	}
	// Both publishes are delivered to c2 in order, if at all: once mark is
	// there, secret/4 would be too.
	for _, m := range c2.waitQuiet(1, 200*time.Millisecond, 10*time.Second) {
		if m.Topic != "mark" {
			t.Errorf("a new session of c, which never subscribed to secret/#, got %s %q", m.Topic, m.Payload)
		}
	}
	c2.close()
	pub.close()
	p.stop(t)

	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	ns, err := db.Namespace(kdbmqtt.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	err = ns.View(func(s *kdb.Snapshot) error {
		for _, index := range []string{"sub", "if"} {
			it := s.Iter(index)
			for ok := it.First(); ok; ok = it.Next() {
				t.Errorf("left in the store after the sessions ended: %s %q", index, it.Key())
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
