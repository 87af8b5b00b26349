package kdbmqtt_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/kdb-project/kdb/vfs"
)

// TestRestart_MessageExpiryKept: a retained message and a message queued
// for an offline session, both with a message expiry interval of 2 s
// (MQTT 5), expire after a restart as they would have without one
// ([MQTT-3.3.2-5]): 4 s after the restart neither is delivered; the same
// without an expiry interval are.
func TestRestart_MessageExpiryKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	b := startInProc(t, vfs.OS, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s := mustDial(t, b.addr, connOpts{id: "ex", cleanStart: true, expiry: 3600})
	s.subscribe(t, 1, "q/#")
	s.close()
	pub := mustDial(t, b.addr, connOpts{id: "ex-pub", cleanStart: true})
	two := uint32(2)
	for _, m := range []struct {
		topic, payload  string
		retain, expires bool
	}{
		{"r/exp", "retained-expiring", true, true},
		{"r/keep", "retained-kept", true, false},
		{"q/exp", "queued-expiring", false, true},
		{"q/keep", "queued-kept", false, false},
	} {
		p := &paho.Publish{Topic: m.topic, QoS: 1, Retain: m.retain, Payload: []byte(m.payload)}
		if m.expires {
			p.Properties = &paho.PublishProperties{MessageExpiry: &two}
		}
		if _, err := pub.c.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	pub.close()
	b.close(t)

	rb := startInProc(t, vfs.OS, dir)
	time.Sleep(4 * time.Second) // beyond the 2 s
	c := mustDial(t, rb.addr, connOpts{id: "ex", expiry: 3600})
	got := countPayloads(c.waitQuiet(1, 500*time.Millisecond, 5*time.Second))
	r := mustDial(t, rb.addr, connOpts{id: "ex-reader", cleanStart: true})
	r.subscribe(t, 1, "r/#")
	for p, n := range countPayloads(r.waitQuiet(1, 500*time.Millisecond, 5*time.Second)) {
		got[p] += n
	}
	for _, p := range []string{"retained-kept", "queued-kept"} {
		if got[p] == 0 {
			t.Errorf("%s: not delivered after the restart", p)
		}
	}
	for _, p := range []string{"retained-expiring", "queued-expiring"} {
		if got[p] != 0 {
			t.Errorf("%s: a message whose 2 s expiry interval had passed was delivered 4 s after a restart", p)
		}
	}
}
