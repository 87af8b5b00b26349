package kdbmqtt_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/kdb-project/kdb/vfs"
)

// TestPowerLoss_EachAckAlone takes a power-loss image of the store right
// after each kind of acknowledgement, on an otherwise idle broker (so no
// other client's synced write carries what the ack is for): CONNACK,
// SUBACK, the PUBACK of a retained message, and a QoS 2 PUBLISH to an
// online subscriber (the image is taken when the subscriber receives it,
// before its PUBREC). Each image, restarted:
//   - after the CONNACK: the session is present;
//   - after the SUBACK: the subscription is there (a new message reaches
//     the session without a new SUBSCRIBE);
//   - after the PUBACK: the retained message is there;
//   - after the QoS 2 PUBLISH: the message comes again only as the resend
//     of that PUBLISH (same packet ID, DUP set), which a client's session
//     state recognises, never as a new message (a second delivery).
func TestPowerLoss_EachAckAlone(t *testing.T) {
	fs := vfs.NewCrashableMem()
	slow := slowSyncs(fs)
	b := startInProc(t, slow, "store")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s := mustDial(t, b.addr, connOpts{id: "alone", cleanStart: true, expiry: 3600})
	afterConnack := fs.CrashClone(vfs.CrashOptions{})
	s.subscribe(t, 2, "a/#")
	afterSuback := fs.CrashClone(vfs.CrashOptions{})
	pub := mustDial(t, b.addr, connOpts{id: "alone-pub", cleanStart: true})
	if err := pub.publish(ctx, "r/alone", 1, true, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	afterPuback := fs.CrashClone(vfs.CrashOptions{})
	// Three QoS 1 messages the subscriber receives and acks first: the QoS 2
	// message then has packet ID 4, where a restarted broker that published
	// it anew (to the session loaded without inflight messages) would give
	// it packet ID 1.
	for _, p := range []string{"a/1", "a/2", "a/3"} {
		if err := pub.publish(ctx, p, 1, false, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	s.waitQuiet(3, 100*time.Millisecond, 10*time.Second)
	time.Sleep(50 * time.Millisecond) // their PUBACKs processed, the removals queued
	type recv struct {
		img *vfs.MemFS
		pid uint16
	}
	got := make(chan recv, 1)
	s.setOnRecv(func(m *paho.Publish) {
		if string(m.Payload) == "q2-alone" {
			select {
			case got <- recv{fs.CrashClone(vfs.CrashOptions{}), m.PacketID}:
			default:
			}
		}
	})
	// A publisher that never sends its PUBREL: the PUBCOMP's synced write
	// would otherwise make the fan-out durable before the subscriber's copy
	// goes out, whether the hook waits for that or not.
	raw := rawQoS2Publish(t, b.addr, "raw-pub", "a/q2", []byte("q2-alone"))
	defer raw.Close()
	var atPublish recv
	select {
	case atPublish = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the online subscriber did not receive the QoS 2 message")
	}
	s.close()
	pub.close()
	b.close(t)

	t.Run("connack", func(t *testing.T) {
		rb := startInProc(t, afterConnack, "store")
		c := mustDial(t, rb.addr, connOpts{id: "alone", expiry: 3600})
		if !c.connack.SessionPresent {
			t.Error("a session whose CONNACK was sent is gone after a power loss")
		}
	})
	t.Run("suback", func(t *testing.T) {
		rb := startInProc(t, afterSuback, "store")
		c := mustDial(t, rb.addr, connOpts{id: "alone", expiry: 3600})
		if !c.connack.SessionPresent {
			t.Fatal("the session is gone after a power loss")
		}
		p := mustDial(t, rb.addr, connOpts{id: "p2", cleanStart: true})
		if err := p.publish(ctx, "a/new", 1, false, []byte("new")); err != nil {
			t.Fatal(err)
		}
		if n := countPayloads(c.waitQuiet(1, 300*time.Millisecond, 5*time.Second))["new"]; n == 0 {
			t.Error("a subscription whose SUBACK was sent is gone after a power loss: a new message did not reach the session")
		}
	})
	t.Run("puback-retained", func(t *testing.T) {
		rb := startInProc(t, afterPuback, "store")
		r := mustDial(t, rb.addr, connOpts{id: "reader", cleanStart: true})
		r.subscribe(t, 1, "r/#")
		if n := countPayloads(r.waitQuiet(1, 300*time.Millisecond, 5*time.Second))["kept"]; n == 0 {
			t.Error("a retained message whose PUBACK was sent is gone after a power loss")
		}
	})
	t.Run("qos2-publish", func(t *testing.T) {
		rb := startInProc(t, atPublish.img, "store")
		c := mustDial(t, rb.addr, connOpts{id: "alone", expiry: 3600})
		n := 0
		for _, m := range c.waitQuiet(1, 500*time.Millisecond, 10*time.Second) {
			if string(m.Payload) != "q2-alone" {
				continue
			}
			n++
			if m.PacketID != atPublish.pid || !m.Duplicate() {
				t.Errorf("a QoS 2 message the subscriber had received (packet %d) came again after a power loss as packet %d, DUP %v: a second delivery, not a resend", atPublish.pid, m.PacketID, m.Duplicate())
			}
		}
		if n == 0 {
			t.Error("a QoS 2 message the subscriber received and did not acknowledge was not sent again after a power loss")
		}
	})
}

// rawQoS2Publish connects as id (MQTT 5, clean start), publishes payload
// to topic with QoS 2 and waits for the PUBREC; it never sends the PUBREL.
func rawQoS2Publish(t *testing.T, addr, id, topic string, payload []byte) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	cp := packets.NewControlPacket(packets.CONNECT)
	c := cp.Content.(*packets.Connect)
	c.ProtocolName, c.ProtocolVersion, c.ClientID, c.CleanStart, c.KeepAlive = "MQTT", 5, id, true, 30
	if _, err := cp.WriteTo(conn); err != nil {
		t.Fatal(err)
	}
	if ack, err := packets.ReadPacket(conn); err != nil || ack.Type != packets.CONNACK {
		t.Fatalf("raw publisher: no CONNACK: %v %v", ack, err)
	}
	pp := packets.NewControlPacket(packets.PUBLISH)
	p := pp.Content.(*packets.Publish)
	p.QoS, p.PacketID, p.Topic, p.Payload = 2, 7, topic, payload
	if _, err := pp.WriteTo(conn); err != nil {
		t.Fatal(err)
	}
	if ack, err := packets.ReadPacket(conn); err != nil || ack.Type != packets.PUBREC {
		t.Fatalf("raw publisher: no PUBREC: %v %v", ack, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn
}
