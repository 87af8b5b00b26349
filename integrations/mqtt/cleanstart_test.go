package kdbmqtt_test

import (
	"context"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// TestPowerLoss_CleanStartDropsInflight: a persistent session with queued
// QoS 1 messages connects again with clean start, which discards them
// ([MQTT-3.1.2-4]); a power-loss image taken right after its CONNACK,
// restarted, must not hand the discarded messages to the new session.
func TestPowerLoss_CleanStartDropsInflight(t *testing.T) {
	fs := vfs.NewCrashableMem()
	b := startInProc(t, slowSyncs(fs), "store")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s := mustDial(t, b.addr, connOpts{id: "cs", cleanStart: true, expiry: 3600})
	s.subscribe(t, 1, "c/#")
	s.close()
	pub := mustDial(t, b.addr, connOpts{id: "cs-pub", cleanStart: true})
	for _, p := range []string{"old-1", "old-2", "old-3"} {
		if err := pub.publish(ctx, "c/x", 1, false, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	pub.close()
	time.Sleep(50 * time.Millisecond) // the fan-outs committed

	fresh := mustDial(t, b.addr, connOpts{id: "cs", cleanStart: true, expiry: 3600})
	img := fs.CrashClone(vfs.CrashOptions{})
	if fresh.connack.SessionPresent {
		t.Fatal("a clean start got session present")
	}
	fresh.close()
	b.close(t)

	rb := startInProc(t, img, "store")
	c := mustDial(t, rb.addr, connOpts{id: "cs", expiry: 3600})
	if !c.connack.SessionPresent {
		t.Error("the session whose CONNACK was sent is gone after a power loss")
	}
	if got := countPayloads(c.waitQuiet(0, 500*time.Millisecond, 5*time.Second)); len(got) > 0 {
		t.Errorf("after a clean start's CONNACK and a power loss, the new session got the discarded session's messages: %v", got)
	}
}
