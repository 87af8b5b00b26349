package kdbmqtt

import (
	"errors"
	"io"
	"log/slog"
	"testing"

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
