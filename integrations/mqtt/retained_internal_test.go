package kdbmqtt

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

// StoredRetainedMessages returns exactly the good retained records, in key
// order, whatever bad ones lie between them (each skipped and counted):
// nothing of a skipped record, and no empty message in its place.
func TestStoredRetainedMessages_SkipsBadRecordsExactly(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace(Namespace)
	if err != nil {
		t.Fatal(err)
	}
	good := func(topic, payload string) []byte {
		m := storage.Message{ID: storage.RetainedKey + "_" + topic, T: storage.RetainedKey, TopicName: topic, Payload: []byte(payload),
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true}}
		return encodeMessage(&m)
	}
	b := ns.NewBatch()
	b.Put(idxRetained, []byte("a/1"), good("a/1", "one"))
	b.Put(idxRetained, []byte("a/2"), []byte{msgFormat, 5, 'b', 'a'}) // truncated
	b.Put(idxRetained, []byte("a/3"), good("a/3", "three"))
	b.Put(idxRetained, []byte("a/4"), good("", "no topic"))
	b.Put(idxRetained, []byte("a/5"), []byte{0x7f})
	b.Put(idxRetained, []byte("a/6"), good("a/6", "six"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	got, err := h.StoredRetainedMessages()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a/1=one", "a/3=three", "a/6=six"}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d: %+v", len(got), len(want), got)
	}
	for i, m := range got {
		if s := m.TopicName + "=" + string(m.Payload); s != want[i] {
			t.Errorf("message %d: %q, want %q", i, s, want[i])
		}
	}
	if n := h.skipped.Load(); n != 3 {
		t.Errorf("skipped %d records, want 3", n)
	}
}

// initTestHook returns a hook initialised on db, with a server of its own
// and no log output (its callbacks are called directly by the test).
func initTestHook(t *testing.T, db *kdb.DB) *Hook {
	t.Helper()
	h := new(Hook)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h.SetOpts(log, &mqtt.HookOptions{})
	if err := h.Init(&Options{DB: db, Server: mqtt.New(&mqtt.Options{Logger: log})}); err != nil {
		t.Fatal(err)
	}
	return h
}

// mochi updates its retained message, then calls OnRetainMessage, and two
// publishers' calls can come in the other order than their updates. The
// store ends as the server's retained message, whatever the order of the
// calls: a set overtaken by a clear, and a clear overtaken by a set.
func TestHook_RetainedStoresTheServersLastState(t *testing.T) {
	set := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName: "r", Payload: []byte("set"), Origin: "setter", Created: 1}
	clear := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName: "r", Origin: "clearer", Created: 2}
	for _, tc := range []struct {
		name    string
		updates []packets.Packet // mochi's Topics.RetainMessage, in this order
		want    string           // the payload the server and the store retain
	}{
		{"set, then clear", []packets.Packet{set, clear}, ""},
		{"clear, then set", []packets.Packet{clear, set}, "set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, ns := memStore(t)
			h := initTestHook(t, db)
			rs := make([]int64, len(tc.updates))
			for i, pk := range tc.updates {
				rs[i] = h.srv.Topics.RetainMessage(pk.Copy(false))
			}
			for i := len(tc.updates) - 1; i >= 0; i-- { // the hook's calls in the other order
				pk := tc.updates[i]
				h.OnRetainMessage(h.srv.NewClient(nil, "test", pk.Origin, false), pk, rs[i])
			}
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			var got string
			switch v, err := ns.Get(idxRetained, retainedKey("r")); {
			case errors.Is(err, kdb.ErrNotFound):
			case err != nil:
				t.Fatal(err)
			default:
				m, err := decodeMessage(v, "retained")
				if err != nil {
					t.Fatal(err)
				}
				got = string(m.Payload)
			}
			if got != tc.want {
				t.Errorf("the store retains %q, the server %q", got, tc.want)
			}
		})
	}
}

// retainedPublish is a retained QoS 1 PUBLISH of payload to topic, as
// mochi hands it to OnPublish.
func retainedPublish(topic, payload string, pid uint16) packets.Packet {
	var p []byte
	if payload != "" {
		p = []byte(payload)
	}
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName: topic, Payload: p, PacketID: pid, Origin: "pub", Created: time.Now().Unix()}
}

// A retained QoS 1 publish is stored in two events: OnPublish (its pending
// record, which the restart publishes again) and OnRetainMessage (its
// retained copy), and its PUBACK waits for both. A power loss between the
// two commits left a message that was published again after the restart
// but not retained (or, for a clear, a retained message its clear was
// published again over). The pending record's commit now retains the
// message too (a reference to the pending record, resolved at load): the
// image has it both published again and retained, as an unacknowledged
// publish must be, wholly or not at all.
func TestHook_RetainedPublishCrashBeforeItsRetainEvent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload string // "" clears the retained message
	}{
		{"set", "new"},
		{"clear", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			db, err := kdb.Open("/db", &kdb.Options{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ns, err := db.Namespace(Namespace)
			if err != nil {
				t.Fatal(err)
			}
			old := storage.Message{T: storage.RetainedKey, Client: "earlier", Origin: "earlier", TopicName: "r/1", Payload: []byte("old"),
				FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true}}
			if err := ns.Update(func(tx *kdb.Txn) error { return tx.Put(idxRetained, retainedKey("r/1"), encodeMessage(&old)) }); err != nil {
				t.Fatal(err)
			}
			h := initTestHook(t, db)
			cl := h.srv.NewClient(nil, "test", "pub", false)
			pk := retainedPublish("r/1", tc.payload, 1)
			pkx, err := h.OnPublish(cl, pk)
			if err != nil {
				t.Fatal(err)
			}
			// The pending record's commit is durable; mochi has not yet
			// retained the message (nor called OnRetainMessage).
			h.mu.Lock()
			c := h.mu.last["pub"].c
			h.mu.Unlock()
			if c == nil {
				t.Fatal("OnPublish wrote nothing for the PUBACK to wait for")
			}
			if err := c.Wait(); err != nil {
				t.Fatal(err)
			}
			if err := db.Sync(); err != nil {
				t.Fatal(err)
			}
			img := fs.CrashClone(vfs.CrashOptions{})

			// The rest of mochi's events on the running hook: the retained
			// record ends as the message itself.
			h.srv.Topics.RetainMessage(pk.Copy(false))
			h.OnRetainMessage(cl, pkx, 1)
			h.OnPublished(cl, pkx)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			v, err := ns.Get(idxRetained, retainedKey("r/1"))
			switch {
			case tc.payload == "" && !errors.Is(err, kdb.ErrNotFound):
				t.Errorf("after the clear's events the store retains %q (%v)", v, err)
			case tc.payload != "" && err != nil:
				t.Fatal(err)
			case tc.payload != "":
				if m, err := decodeMessage(v, "retained"); err != nil || string(m.Payload) != tc.payload {
					t.Errorf("after the publish's events the retained record is %q (%v), want the message %q", v, err, tc.payload)
				}
			}

			// The power-loss image, restarted.
			db2, err := kdb.Open("/db", &kdb.Options{FS: img})
			if err != nil {
				t.Fatal(err)
			}
			defer db2.Close()
			h2 := initTestHook(t, db2)
			defer h2.Stop()
			if len(h2.replay) != 1 || h2.replay[0].msg.TopicName != "r/1" || string(h2.replay[0].msg.Payload) != tc.payload {
				t.Fatalf("published again after the restart: %+v; want the retained publish of %q", h2.replay, tc.payload)
			}
			ret, err := h2.StoredRetainedMessages()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range ret {
				got = append(got, m.TopicName+"="+string(m.Payload))
			}
			want := []string{"r/1=" + tc.payload}
			if tc.payload == "" {
				want = nil
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || h2.Skipped() != 0 {
				t.Errorf("the message is published again after the restart, and retained: %q (%d records skipped); want %q", got, h2.Skipped(), want)
			}
			if tc.payload != "" && (!ret[0].FixedHeader.Retain || ret[0].T != storage.RetainedKey || ret[0].Client != "pub") {
				t.Errorf("retained message loaded: %+v; want a retained record of pub's", ret[0])
			}
		})
	}
}
