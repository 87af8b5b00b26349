package kdbmqtt_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// TestRestart_ShortSessionExpiryExpires guards the stored session-expiry
// flag (records.go clientOf, "SessionExpiryIntervalFlag:
// props.SessionExpiryIntervalFlag"): mochi expires a loaded MQTT 5 session
// after its own interval only if the flag is set, and after the server's
// maximum (here never) if not. A session that connected with a 5 s expiry
// and went offline is handed to the restarted broker with its flag and
// interval, and expires about 5 s after the restart with the message
// queued for it: its reconnect (clean start off) finds no session and
// gets nothing. (5 s, not less: mochi may expire the session as soon as
// its interval has passed since the load, and the publish and its fsyncs
// must come before that on a loaded machine.)
func TestRestart_ShortSessionExpiryExpires(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	b := startInProc(t, vfs.OS, dir)
	s := mustDial(t, b.addr, connOpts{id: "se", expiry: 5})
	s.subscribe(t, 1, "se/#")
	s.close()
	time.Sleep(100 * time.Millisecond) // the DISCONNECT processed
	b.close(t)

	rb := startInProc(t, vfs.OS, dir)
	cs, err := rb.hook.StoredClients()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.ID == "se" && (!c.Properties.SessionExpiryIntervalFlag || c.Properties.SessionExpiryInterval != 5) {
			t.Errorf("stored session: expiry interval %d, flag %v; want 5, true (without the flag mochi expires it after the server's maximum)",
				c.Properties.SessionExpiryInterval, c.Properties.SessionExpiryIntervalFlag)
		}
	}
	if _, ok := rb.srv.Clients.Get("se"); !ok {
		t.Fatal("the session is not there right after the restart")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub := mustDial(t, rb.addr, connOpts{id: "se-pub", cleanStart: true})
	if err := pub.publish(ctx, "se/x", 1, false, []byte("queued")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if cl, ok := rb.srv.Clients.Get("se"); ok && cl.State.Inflight.Len() > 0 {
			break // queued for the offline session
		}
		if time.Now().After(deadline) {
			t.Fatal("the message was not queued for the offline session")
		}
	}
	// mochi checks expiries every second, in whole seconds: a 5 s session
	// loaded at t expires by t+7 s.
	for deadline := time.Now().Add(12 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, ok := rb.srv.Clients.Get("se"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a session with a 5 s expiry is still there 12 s after the restart")
		}
	}
	c := mustDial(t, rb.addr, connOpts{id: "se", expiry: 5})
	if c.connack.SessionPresent {
		t.Error("the reconnect of an expired session was told a session is present")
	}
	if n := len(c.waitQuiet(0, 200*time.Millisecond, 2*time.Second)); n != 0 {
		t.Errorf("an expired session's reconnect got %d messages queued before it expired", n)
	}
}
