package kdbmqtt_test

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
	"github.com/kdb-project/kdb/integrations/mqtt/internal/brokerconf"
	"github.com/kdb-project/kdb/vfs"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestPowerLoss_PubrelIsDurable guards the wait in release (hook.go): a
// PUBREL to a subscriber goes out only once the PUBREL state of its QoS 2
// message is synced. A hook after the kdb hook takes a power-loss image
// (only synced data) when the PUBREL to an online subscriber is encoded,
// the kdb hook's OnPacketEncode done. Opened, the image holds the
// subscriber's inflight record of that packet ID in its PUBREL state, and a
// restarted broker resends the PUBREL, not the PUBLISH: the subscriber,
// which completed the exchange, took a resent PUBLISH for a new message (an
// exactly-once message delivered twice).
func TestPowerLoss_PubrelIsDurable(t *testing.T) {
	fs := vfs.NewCrashableMem()
	// fsyncs take 20 ms: a PUBREL that did not wait for its state's fsync
	// is encoded well before that fsync is done, even on a loaded machine.
	b := startInProc(t, syncsTaking(fs, 20*time.Millisecond), "store")
	spy := &pubrelImage{fs: fs, client: "rel-sub", got: make(chan pubrelShot, 1)}
	if err := b.srv.AddHook(spy, nil); err != nil { // after the kdb hook
		t.Fatal(err)
	}
	s := mustDial(t, b.addr, connOpts{id: "rel-sub", cleanStart: true, expiry: 3600})
	s.subscribe(t, 2, "rel/#")
	// A publisher that never sends its PUBREL: no PUBCOMP's synced write
	// runs while the subscriber's PUBREL is written.
	raw := rawQoS2Publish(t, b.addr, "rel-pub", "rel/q2", []byte("q2-once"))
	defer raw.Close()
	var shot pubrelShot
	select {
	case shot = <-spy.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no PUBREL was sent to the subscriber")
	}
	if n := countPayloads(s.waitQuiet(1, 100*time.Millisecond, 5*time.Second))["q2-once"]; n != 1 {
		t.Fatalf("the subscriber received the QoS 2 message %d times before the power loss, want 1", n)
	}
	s.close()
	b.close(t)

	var rec *storage.Message
	inflight := storedInflight(t, shot.img.Clone())
	for i, m := range inflight {
		if m.Client == "rel-sub" && m.PacketID == shot.pid {
			rec = &inflight[i]
		}
	}
	switch {
	case rec == nil:
		t.Errorf("after a power loss when the PUBREL of packet %d was sent, the subscriber's inflight record of it is gone (inflight: %+v)", shot.pid, inflight)
	case rec.FixedHeader.Type != packets.Pubrel:
		t.Errorf("after a power loss when the PUBREL of packet %d was sent, its inflight record is of packet type %d, want PUBREL (%d): the PUBREL went out before its state was durable", shot.pid, rec.FixedHeader.Type, packets.Pubrel)
	}

	rb := startInProc(t, shot.img, "store")
	c := mustDial(t, rb.addr, connOpts{id: "rel-sub", expiry: 3600})
	if !c.connack.SessionPresent {
		t.Fatal("the persistent session is gone after the power loss")
	}
	if n := countPayloads(c.waitQuiet(0, 500*time.Millisecond, 5*time.Second))["q2-once"]; n != 0 {
		t.Errorf("a QoS 2 message whose PUBREL the subscriber had received came again after a power loss (%d times): delivered twice", n)
	}
}

// pubrelShot is a power-loss image taken as a PUBREL was encoded, and the
// PUBREL's packet ID.
type pubrelShot struct {
	img *vfs.MemFS
	pid uint16
}

// pubrelImage takes a power-loss image of fs when the first PUBREL to
// client is encoded (added after the kdb hook: its OnPacketEncode is done).
type pubrelImage struct {
	mqtt.HookBase
	fs     *vfs.MemFS
	client string
	once   sync.Once
	got    chan pubrelShot
}

func (h *pubrelImage) ID() string { return "pubrel-image" }

func (h *pubrelImage) Provides(b byte) bool { return b == mqtt.OnPacketEncode }

func (h *pubrelImage) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if cl.ID == h.client && pk.FixedHeader.Type == packets.Pubrel {
		h.once.Do(func() { h.got <- pubrelShot{h.fs.CrashClone(vfs.CrashOptions{}), pk.PacketID} })
	}
	return pk
}

// storedInflight opens the store in fs with a kdb hook, not served, and
// returns the inflight messages it hands the server at a start.
func storedInflight(t *testing.T, fs vfs.FS) []storage.Message {
	t.Helper()
	db, err := kdb.Open("store", &kdb.Options{FS: fs, SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	srv, err := brokerconf.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := new(kdbmqtt.Hook)
	if err := srv.AddHook(h, &kdbmqtt.Options{DB: db, Server: srv}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if _, err := h.StoredClients(); err != nil {
		t.Fatal(err)
	}
	out, err := h.StoredInflightMessages()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
