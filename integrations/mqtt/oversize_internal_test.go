package kdbmqtt

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// newSmallHook returns a hook on a store of 1 MiB segments (MaxBatchSize
// 256 KiB), as the in-process brokers use, counting the store's fsyncs.
func newSmallHook(t *testing.T) (*Hook, *atomic.Int64) {
	t.Helper()
	var syncs atomic.Int64
	fs := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if e.Op == vfs.OpSync {
			syncs.Add(1)
		}
		return nil
	})
	db, err := kdb.Open("/db", &kdb.Options{FS: fs, SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	t.Cleanup(func() {
		_ = h.Stop()
		_ = db.Close()
	})
	return h, &syncs
}

// A QoS 2 copy too large to store even alone is not stored, but is held
// like the stored copies of its fan-out: until the fan-out's last commit
// (which removes the pending publish) and a sync. Sent before, a crash
// would leave the pending publish, which the restart publishes again: the
// subscriber would get the QoS 2 message twice.
func TestHook_UnstoredCopyWaitsForFanout(t *testing.T) {
	h, syncs := newSmallHook(t)
	h.mu.Lock()
	h.mu.seq++
	p := &publish{tag: tagPrefix + "1", seq: h.mu.seq, client: "pub", pid: 7, qos: 2, ready: make(chan struct{})}
	h.mu.active[p.tag] = p
	h.mu.Unlock()

	sub := &mqtt.Client{ID: "sub"}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2},
		TopicName:   "big",
		PacketID:    1,
		Payload:     bytes.Repeat([]byte("x"), 300_000), // over MaxBatchSize
		Connect:     packets.ConnectParams{ClientIdentifier: p.tag},
	}
	h.OnQosPublish(sub, pk, 0, 0)
	h.finishTag(p.tag, true)
	if p.err != nil || p.commit == nil {
		t.Fatalf("the fan-out: commit %v, error %v", p.commit, p.err)
	}

	h.mu.Lock()
	f := h.mu.flights["sub"][1]
	h.mu.Unlock()
	if f == nil {
		t.Fatal("the unstored QoS 2 copy has no flight: gate sends it at once, before the fan-out's last commit")
	}
	if !f.unstored || f.pub != nil || f.commit != p.commit || !f.noSync {
		t.Fatalf("the unstored copy's flight: %+v, want unstored, waiting for the fan-out's last commit %p and a sync", f, p.commit)
	}
	before := syncs.Load()
	h.gate(sub, 1, true)
	if syncs.Load() == before {
		t.Error("gate sent the unstored QoS 2 copy without syncing the fan-out's last commit")
	}
	h.mu.Lock()
	noSync := f.noSync
	h.mu.Unlock()
	if noSync {
		t.Error("the fan-out's last commit is not marked durable after gate")
	}
	if _, err := h.ns.Get(idxInflight, inflightKey("sub", 1)); err == nil {
		t.Error("the copy too large to store was stored")
	}

	// Its completion removes nothing from the store.
	h.OnQosComplete(sub, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubcomp}, PacketID: 1})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.flights["sub"][1] != nil {
		t.Error("the unstored copy's flight is still there after its completion")
	}
	if len(h.mu.dels) != 0 {
		t.Errorf("%d inflight removals queued for a copy never stored, want 0", len(h.mu.dels))
	}
}

// A will too large for the store is logged, not recorded against its
// client: that client's next connection gets its CONNACK. A publish in
// progress (awaiting its ack) whose retained record the store refuses
// still has its ack refused.
func TestHook_OversizedWillNotSticky(t *testing.T) {
	h, _ := newSmallHook(t)
	big := bytes.Repeat([]byte("w"), 300_000) // over MaxBatchSize
	will := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName:   "wills/gone",
		Payload:     big,
		Origin:      "gone",
	}
	h.srv.Topics.RetainMessage(will.Copy(false)) // mochi's update before the event
	h.OnRetainMessage(&mqtt.Client{ID: "gone"}, will, 1)
	h.mu.Lock()
	d := h.mu.last["gone"]
	h.mu.Unlock()
	if d.err != nil {
		t.Errorf("a will too large to store left error %v on its client: its next CONNACK is refused", d.err)
	}

	p := &publish{tag: tagPrefix + "9", client: "live", pid: 3, qos: 1, ready: make(chan struct{})}
	h.mu.Lock()
	h.mu.open["live"] = p
	h.mu.Unlock()
	pub := will
	pub.Origin = "live"
	pub.Connect.ClientIdentifier = p.tag
	h.srv.Topics.RetainMessage(pub.Copy(false))
	h.OnRetainMessage(&mqtt.Client{ID: "live"}, pub, 1)
	h.mu.Lock()
	d = h.mu.last["live"]
	delete(h.mu.open, "live")
	h.mu.Unlock()
	if d.err == nil {
		t.Error("a publish in progress whose retained record the store refused: its ack is not refused")
	}
}
