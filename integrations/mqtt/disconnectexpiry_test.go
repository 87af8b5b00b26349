package kdbmqtt_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/kdb-project/kdb/vfs"
)

// TestRestart_DisconnectSessionExpiryKept: an MQTT 5 client may change its
// session expiry interval in its DISCONNECT ([MQTT-3.14.2-2]). A session
// that connected with 2 s and left with 3600 s keeps its subscription and
// queued message across a clean restart of the broker, 4 s after which it
// reconnects.
func TestRestart_DisconnectSessionExpiryKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	b := startInProc(t, vfs.OS, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s := mustDial(t, b.addr, connOpts{id: "de", cleanStart: true, expiry: 2})
	s.subscribe(t, 1, "d/#")
	long := uint32(3600)
	if err := s.c.Disconnect(&paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: &long}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the DISCONNECT processed
	pub := mustDial(t, b.addr, connOpts{id: "de-pub", cleanStart: true})
	if err := pub.publish(ctx, "d/x", 1, false, []byte("queued")); err != nil {
		t.Fatal(err)
	}
	pub.close()
	b.close(t)

	rb := startInProc(t, vfs.OS, dir)
	time.Sleep(4 * time.Second) // beyond the 2 s the session connected with
	c := mustDial(t, rb.addr, connOpts{id: "de", expiry: 3600})
	if !c.connack.SessionPresent {
		t.Error("a session whose DISCONNECT set its expiry to 3600 s was expired 2 s after a restart")
	}
	if n := countPayloads(c.waitQuiet(1, 300*time.Millisecond, 5*time.Second))["queued"]; n == 0 {
		t.Error("the message queued for the session was not delivered after the restart")
	}
}
