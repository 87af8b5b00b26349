package kdbmqtt_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestResume_KeepsInflight: a persistent session with queued QoS 1 and
// QoS 2 messages reconnects on a connection that goes away before it
// acknowledges anything (its client acks nothing and closes right after
// the CONNACK, so mochi's resend of the queue stops early); the broker is
// then killed with -9 and restarted. Every queued message must still be
// delivered to the session (QoS 2 once). mochi moves a resumed session's
// inflight messages to the new client and drops them from the old one with
// OnQosDropped; a hook that removes their records there loses every
// message the resend did not reach before the crash.
func TestResume_KeepsInflight(t *testing.T) {
	bin := buildBin(t, "./cmd/kdb-mqtt")
	dir := t.TempDir()
	p := startBroker(t, bin, "-store", dir)
	s := mustDial(t, p.addr, connOpts{id: "resumer", cleanStart: true, expiry: 3600})
	s.subscribe(t, 2, "rs/#")
	s.close()

	const n = 40
	pub := mustDial(t, p.addr, connOpts{id: "rs-pub", cleanStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := map[string]byte{}
	for i := range n {
		qos := byte(1 + i%2)
		payload := fmt.Sprintf("rs-%d-q%d", i, qos)
		if err := pub.publish(ctx, fmt.Sprintf("rs/%d", i), qos, false, []byte(payload)); err != nil {
			t.Fatal(err)
		}
		want[payload] = qos
	}
	pub.close()

	// Resume the session on a connection that acks nothing and leaves.
	for range 3 {
		conn, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn, EnableManualAcknowledgment: true, OnClientError: func(error) {}})
		e := uint32(3600)
		ca, err := c.Connect(ctx, &paho.Connect{ClientID: "resumer", KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: &e}})
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !ca.SessionPresent {
			t.Fatal("the session was not present at its resume")
		}
		time.Sleep(100 * time.Millisecond) // the broker notices; NoSync writes reach the disk (SyncInterval)
	}
	p.kill()

	p = startBroker(t, bin, "-store", dir)
	s = mustDial(t, p.addr, connOpts{id: "resumer", expiry: 3600})
	if !s.connack.SessionPresent {
		t.Fatal("the session is gone after the restart")
	}
	got := countPayloads(s.waitQuiet(n, 1000*time.Millisecond, 30*time.Second))
	var lost, dup []string
	for payload, qos := range want {
		switch {
		case got[payload] == 0:
			lost = append(lost, payload)
		case qos == 2 && got[payload] > 1:
			dup = append(dup, payload)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d queued messages lost after the session resumed once and the broker was killed: %v", len(lost), n, head(lost, 10))
	}
	if len(dup) > 0 {
		t.Errorf("QoS 2 messages delivered more than once: %v", dup)
	}
	p.stop(t)
}
