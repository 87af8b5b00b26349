package kdbmqtt

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

// A start over damaged client and fan-out records: each is skipped and
// logged, and what only it gave a use to goes with it, at load, instead
// of staying stored for good. The subscriptions and inflight messages of
// a client record that cannot be read belong to a session the server does
// not restore (the client's next CONNECT gets a new one): they are not
// handed out, and are removed with the record (a new session of that
// client ID would otherwise get them back at the restart after it). A
// fan-out record that cannot be read is removed; the copies named by the
// good records of its publish are undone, and the publish published again.
// Other clients' records stay, and are handed out.
func TestHook_LoadRemovesWhatDamagedRecordsName(t *testing.T) {
	db, ns := memStore(t)
	sub := func(client, filter string) []byte {
		return marshal(storage.Subscription{ID: client + ":" + filter, T: storage.SubscriptionKey, Client: client, Filter: filter, Qos: 1})
	}
	flight := func(client string, pid uint16, payload string) []byte {
		m := storage.Message{T: storage.InflightKey, Client: client, TopicName: "x", PacketID: pid, Payload: []byte(payload),
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}
		return encodeMessage(&m)
	}
	pend := storage.Message{T: pendingT, Client: "pub", Origin: "pub", TopicName: "x", PacketID: 9, Payload: []byte("big"),
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}
	b := ns.NewBatch()
	// A client record that does not decode, and its session.
	b.Put(idxClients, clientKey("bad"), []byte("{not json"))
	b.Put(idxSubs, subKey("bad", "a/#"), sub("bad", "a/#"))
	b.Put(idxSubs, subKey("bad", "b"), sub("bad", "b"))
	b.Put(idxInflight, inflightKey("bad", 1), flight("bad", 1, "queued"))
	b.Put(idxInflight, inflightKey("bad", 2), flight("bad", 2, "queued"))
	// A client record under another client's key.
	b.Put(idxClients, clientKey("moved"), marshal(&storage.Client{ID: "elsewhere", T: storage.ClientKey}))
	b.Put(idxSubs, subKey("moved", "m"), sub("moved", "m"))
	// A good session.
	b.Put(idxClients, clientKey("good"), marshal(&storage.Client{ID: "good", T: storage.ClientKey}))
	b.Put(idxSubs, subKey("good", "a/#"), sub("good", "a/#"))
	b.Put(idxInflight, inflightKey("good", 1), flight("good", 1, "queued"))
	// Pending publish 7's fan-out, cut by a stop: part 0 (good's copy)
	// readable, part 1 damaged.
	b.Put(idxPending, pendingKey(7), encodeMessage(&pend))
	b.Put(idxInflight, inflightKey("good", 2), flight("good", 2, "big"))
	b.Put(idxFanout, fanoutKey(7, 0), encodeKeyList([][]byte{inflightKey("good", 2)}))
	b.Put(idxFanout, fanoutKey(7, 1), []byte{3, 1})
	// A damaged fan-out record of a publish no longer stored, and one
	// whose key is not a fan-out key.
	b.Put(idxFanout, fanoutKey(3, 0), []byte{0xff})
	b.Put(idxFanout, []byte("short"), encodeKeyList([][]byte{inflightKey("good", 1)}))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}

	h := initTestHook(t, db)
	// mochi's loading order.
	clients, err := h.StoredClients()
	if err != nil {
		t.Fatal(err)
	}
	subs, err := h.StoredSubscriptions()
	if err != nil {
		t.Fatal(err)
	}
	inflight, err := h.StoredInflightMessages()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range clients {
		got = append(got, "client "+c.ID)
	}
	for _, s := range subs {
		got = append(got, "sub "+s.Client+" "+s.Filter)
	}
	for _, m := range inflight {
		got = append(got, fmt.Sprintf("inflight %s %d", m.Client, m.PacketID))
	}
	if want := []string{"client good", "sub good a/#", "inflight good 1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("handed to the server: %q, want %q", got, want)
	}
	if len(h.replay) != 1 || h.replay[0].seq != 7 {
		t.Errorf("published again: %+v, want pending publish 7", h.replay)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}

	var left []string
	if err := ns.View(func(s *kdb.Snapshot) error {
		for _, index := range []string{idxClients, idxSubs, idxInflight, idxFanout, idxPending} {
			it := s.Iter(index)
			for ok := it.First(); ok; ok = it.Next() {
				left = append(left, fmt.Sprintf("%s %q", index, it.Key()))
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(left)
	var want []string
	for _, r := range []struct {
		index string
		key   []byte
	}{{idxClients, clientKey("good")}, {idxSubs, subKey("good", "a/#")}, {idxInflight, inflightKey("good", 1)}, {idxPending, pendingKey(7)}} {
		want = append(want, fmt.Sprintf("%s %q", r.index, r.key))
	}
	sort.Strings(want)
	if !reflect.DeepEqual(left, want) {
		t.Errorf("stored after the start:\n %q\nwant\n %q", left, want)
	}
}
