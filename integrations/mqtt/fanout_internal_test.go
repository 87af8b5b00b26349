package kdbmqtt

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

// A store left by a stop between the parts of a split fan-out (a part and
// its fan-out record on disk, the last commit not): at load the copies the
// record names are removed with it, and not handed to the server, while
// the pending publish is published again; a fan-out record whose pending
// publish is gone (not expected) is removed, its copies kept; other
// inflight records are untouched.
func TestHook_LoadUndoesInterruptedFanout(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace(Namespace)
	if err != nil {
		t.Fatal(err)
	}
	copyOf := func(client string, pid uint16, payload string) []byte {
		m := storage.Message{T: storage.InflightKey, Client: client, TopicName: "fan/x", PacketID: pid, Payload: []byte(payload),
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}
		return encodeMessage(&m)
	}
	pend := storage.Message{T: pendingT, Client: "pub", Origin: "pub", TopicName: "fan/x", PacketID: 9, Payload: []byte("big"),
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}
	b := ns.NewBatch()
	b.Put(idxPending, pendingKey(7), encodeMessage(&pend))
	// Part 0 of pending publish 7's fan-out: s1 and s2.
	b.Put(idxInflight, inflightKey("s1", 1), copyOf("s1", 1, "big"))
	b.Put(idxInflight, inflightKey("s2", 1), copyOf("s2", 1, "big"))
	b.Put(idxFanout, fanoutKey(7, 0), encodeKeyList([][]byte{inflightKey("s1", 1), inflightKey("s2", 1)}))
	// An older message of s1's, fanned out long ago.
	b.Put(idxInflight, inflightKey("s1", 2), copyOf("s1", 2, "old"))
	// A fan-out record of a publish whose pending record is gone.
	b.Put(idxInflight, inflightKey("s3", 5), copyOf("s3", 5, "done"))
	b.Put(idxFanout, fanoutKey(3, 0), encodeKeyList([][]byte{inflightKey("s3", 5)}))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}

	h := initTestHook(t, db)
	var got []string
	for _, m := range h.loadedInflight {
		got = append(got, m.Client+"="+string(m.Payload))
	}
	if want := []string{"s1=old", "s3=done"}; !reflect.DeepEqual(got, want) {
		t.Errorf("inflight messages loaded: %v, want %v (the copies of the interrupted fan-out removed)", got, want)
	}
	if len(h.replay) != 1 || h.replay[0].seq != 7 {
		t.Errorf("pending publishes to publish again: %+v, want sequence 7", h.replay)
	}
	if h.mu.seq != 7 {
		t.Errorf("next sequence after %d, want after 7", h.mu.seq)
	}
	for _, k := range [][]byte{inflightKey("s1", 1), inflightKey("s2", 1)} {
		if _, err := ns.Get(idxInflight, k); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("copy %q of the interrupted fan-out still stored: %v", k, err)
		}
	}
	for _, k := range [][]byte{inflightKey("s1", 2), inflightKey("s3", 5)} {
		if _, err := ns.Get(idxInflight, k); err != nil {
			t.Errorf("inflight record %q: %v, want it kept", k, err)
		}
	}
	if err := ns.View(func(s *kdb.Snapshot) error {
		n, err := s.Len(idxFanout)
		if err == nil && n != 0 {
			t.Errorf("%d fan-out records left after load, want 0", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// encodedMessageSize is len(encodeMessage), which OnPublish checks against
// the store's limit without encoding.
func TestEncodedMessageSize(t *testing.T) {
	big := fullMessage()
	big.Payload = bytes.Repeat([]byte("p"), 300_000)
	big.Created, big.Sent = -1<<40, 1<<62
	for _, m := range []storage.Message{fullMessage(), {}, {TopicName: "t"}, big} {
		if got, want := encodedMessageSize(&m), len(encodeMessage(&m)); got != want {
			t.Errorf("encodedMessageSize %d, len(encodeMessage) %d", got, want)
		}
	}
}

// A fan-out record reads back its keys; a damaged one is malformed.
func TestKeyList_RoundTrip(t *testing.T) {
	keys := [][]byte{inflightKey("a", 1), inflightKey(string(bytes.Repeat([]byte("c"), 300)), 65535)}
	got, err := decodeKeyList(encodeKeyList(keys))
	if err != nil || !reflect.DeepEqual(got, keys) {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	v := encodeKeyList(keys)
	for i := range len(v) {
		if _, err := decodeKeyList(v[:i]); err == nil {
			t.Errorf("truncated to %d bytes: no error", i)
		}
	}
	if _, err := decodeKeyList(append(v, 0)); err == nil {
		t.Error("a byte after the record: no error")
	}
}
