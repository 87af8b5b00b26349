package kdbmqtt

import (
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Clients whose session ends with their connection (random client IDs,
// the common case) leave nothing in the hook's memory: mochi's own events
// at their end (the removal of their subscriptions, the will's retained
// copy and the session record without the will) are followed by no ack of
// theirs, and what an ack would wait for was kept for good, one entry per
// client ID ever seen.
func TestHook_EndedClientsLeaveNoAckState(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	h := initTestHook(t, db)
	const n = 100
	for i := 0; i < n; i++ {
		cl := h.srv.NewClient(nil, "t", fmt.Sprintf("c%d", i), false)
		cl.Properties.ProtocolVersion = 5 // session expiry 0: ends with the connection
		h.OnSessionEstablish(cl, packets.Packet{Connect: packets.ConnectParams{Clean: true}})
		h.OnPacketEncode(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}})
		subs := packets.Subscriptions{{Filter: "a/#", Qos: 1}}
		h.OnSubscribed(cl, packets.Packet{PacketID: 1, Filters: subs}, []byte{1})
		h.OnPacketEncode(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, PacketID: 1})
		// A QoS 0 retained message (no ack), then the end: a will with a
		// retained copy, the disconnect, mochi's UnsubscribeClient.
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true}, TopicName: fmt.Sprintf("r/%d", i), Payload: []byte("x"), Origin: cl.ID, Created: 1}
		h.srv.Topics.RetainMessage(pk)
		h.OnRetainMessage(cl, pk, 1)
		will := pk
		will.FixedHeader.Qos, will.TopicName = 1, fmt.Sprintf("w/%d", i)
		h.srv.Topics.RetainMessage(will)
		h.OnRetainMessage(cl, will, 1)
		h.OnWillSent(cl, will)
		h.OnDisconnect(cl, nil, true)
		h.OnUnsubscribed(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe}, Filters: subs})
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	left, conns := len(h.mu.last), len(h.mu.conns)
	h.mu.Unlock()
	if left != 0 {
		t.Errorf("after %d clients connected, subscribed, published a retained message, left a will and ended: %d kept what their next ack would wait for, want 0", n, left)
	}
	if conns != 0 {
		t.Errorf("after %d clients ended: %d connections still held, want 0", n, conns)
	}
}

// A connection whose CONNACK could not be written (the client went away
// while the hook waited for its session's fsync) gets no OnDisconnect from
// mochi, only, later, OnClientExpired: the hook forgets it there.
func TestHook_ExpiredUnackedConnectionForgotten(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	h := initTestHook(t, db)
	const n = 10
	for i := 0; i < n; i++ {
		cl := h.srv.NewClient(nil, "t", fmt.Sprintf("c%d", i), false)
		cl.Properties.ProtocolVersion = 5
		h.OnSessionEstablish(cl, packets.Packet{Connect: packets.ConnectParams{Clean: true}})
		h.OnClientExpired(cl)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	conns := len(h.mu.conns)
	h.mu.Unlock()
	if conns != 0 {
		t.Errorf("after %d connections expired without a disconnect: %d still held, want 0", n, conns)
	}
}
