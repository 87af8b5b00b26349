package kdbmqtt_test

import (
	"context"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// subscribeMany subscribes c to n filters longFilter(0...n-1) at QoS 1, 100 to a
// SUBSCRIBE (each SUBSCRIBE is small; together they are many).
func subscribeMany(t *testing.T, c *client, n int) {
	t.Helper()
	for i := 0; i < n; i += 100 {
		var topics []string
		for j := i; j < min(i+100, n); j++ {
			topics = append(topics, longFilter(j))
		}
		c.subscribe(t, 1, topics...)
	}
}

// A session with more subscriptions than one commit can remove resumes
// with clean start: mochi unsubscribes the old session from every filter
// in one OnUnsubscribed event. The new connection gets its CONNACK, and the
// old subscriptions are gone from the store: after a restart no message on
// them reaches the client.
func TestHook_CleanStartDropsManySubscriptions(t *testing.T) {
	fs := vfs.NewMem()
	b := startInProc(t, fs, "store")
	s := mustDial(t, b.addr, connOpts{id: "s", cleanStart: true, expiry: 3600})
	subscribeMany(t, s, bigN)
	s.close()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s2, err := dial(ctx, b.addr, connOpts{id: "s", cleanStart: true, expiry: 3600})
	if err != nil {
		t.Fatalf("the session's clean-start reconnect was refused: %v", err)
	}
	s2.close()
	b.close(t)
	if n := countIndex(t, fs, "store", "sub"); n != 0 {
		t.Errorf("%d subscription records left after the clean start discarded them all, want 0", n)
	}

	b = startInProc(t, fs, "store")
	s3 := mustDial(t, b.addr, connOpts{id: "s", cleanStart: false, expiry: 3600})
	pub := mustDial(t, b.addr, connOpts{id: "pub", cleanStart: true})
	if err := pub.publish(ctx, longFilter(7), 1, false, []byte("not for s")); err != nil {
		t.Fatal(err)
	}
	if got := s3.waitQuiet(1, 300*time.Millisecond, 2*time.Second); len(got) != 0 {
		t.Errorf("after the restart the client got %d messages on filters its clean start discarded: %s %q", len(got), got[0].Topic, got[0].Payload)
	}
}

// One SUBSCRIBE of 1,000 filters of 280 bytes (280 KB of subscription
// records, more than one commit of the in-process store takes) is stored
// in parts and granted; it used to be refused (the connection closed
// without a SUBACK) at every try.
func TestHook_OneSubscribeOfManyFilters(t *testing.T) {
	fs := vfs.NewMem()
	b := startInProc(t, fs, "store")
	s := mustDial(t, b.addr, connOpts{id: "s", cleanStart: true, expiry: 3600})
	var topics []string
	for i := 0; i < 1000; i++ {
		topics = append(topics, longFilter(i))
	}
	s.subscribe(t, 1, topics...)
	s.close()
	b.close(t)
	if n := countIndex(t, fs, "store", "sub"); n != 1000 {
		t.Errorf("%d subscription records stored, want 1000", n)
	}
}
