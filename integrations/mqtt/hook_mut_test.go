package kdbmqtt

// Tests added by mutation testing of the hook's store logic (hook.go and
// the record checks of records.go): each guards a check of what the hook
// reads back at a start that a deliberate breakage of the code removed
// without any other test failing. The records are written into the store
// directly, as a damaged store or another writer would leave them.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

// memStore returns a store in memory and the hook's namespace in it.
func memStore(t *testing.T) (*kdb.DB, *kdb.Namespace) {
	t.Helper()
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ns, err := db.Namespace(Namespace)
	if err != nil {
		t.Fatal(err)
	}
	return db, ns
}

// TestMut_StoredSubscriptionsSkipsBadRecords guards decodeSub's checks
// (records.go, "s.Client == "" || s.Filter == "" || s.Qos > 2"): a
// subscription of QoS 3 (no such QoS) or without a client is skipped and
// counted, not handed to the server; the good ones are.
func TestMut_StoredSubscriptionsSkipsBadRecords(t *testing.T) {
	db, ns := memStore(t)
	sub := func(client, filter string, qos byte) []byte {
		return marshal(storage.Subscription{ID: client + ":" + filter, T: storage.SubscriptionKey, Client: client, Filter: filter, Qos: qos})
	}
	b := ns.NewBatch()
	b.Put(idxClients, clientKey("c"), marshal(&storage.Client{ID: "c", T: storage.ClientKey})) // a session's subscriptions only are handed out
	b.Put(idxSubs, subKey("c", "a/1"), sub("c", "a/1", 2))
	b.Put(idxSubs, subKey("c", "a/2"), sub("c", "a/2", 3))
	b.Put(idxSubs, subKey("c", "a/3"), sub("", "a/3", 1))
	b.Put(idxSubs, subKey("c", "a/4"), sub("c", "a/4", 0))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	got, err := h.StoredSubscriptions()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Filter != "a/1" || got[1].Filter != "a/4" {
		t.Fatalf("subscriptions: %+v; want a/1 and a/4", got)
	}
	if n := h.Skipped(); n != 2 {
		t.Errorf("skipped %d records, want 2", n)
	}
}

// TestMut_StoredClientsSkipsBadRecords guards StoredClients' check of a
// session record's key (hook.go, "!bytes.Equal(k, clientKey(c.ID))"): a
// client record stored under another client's key, or without an ID, is
// skipped and counted. (decodeClient's own check of the ID is redundant
// with this one: the empty ID's key is the empty key, which kdb refuses.)
func TestMut_StoredClientsSkipsBadRecords(t *testing.T) {
	db, ns := memStore(t)
	cl := func(id string) []byte { return marshal(&storage.Client{ID: id, T: storage.ClientKey}) }
	b := ns.NewBatch()
	b.Put(idxClients, clientKey("a"), cl("a"))
	b.Put(idxClients, clientKey("b"), cl(""))
	b.Put(idxClients, clientKey("c"), cl("someone-else"))
	b.Put(idxClients, clientKey("d"), cl("d"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	got, err := h.StoredClients()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "d" {
		t.Fatalf("clients: %+v; want a and d", got)
	}
	if n := h.Skipped(); n != 2 {
		t.Errorf("skipped %d records, want 2", n)
	}
}

// TestMut_StoredRetainedSkipsBadRecords guards the checks of a retained
// record (records.go decodeMessageInto, "m.FixedHeader.Qos > 2"; hook.go
// StoredRetainedMessages, "m.FixedHeader.Type != packets.Publish"): a
// retained record of QoS 3, or of a packet type other than PUBLISH, is
// malformed, skipped and counted.
func TestMut_StoredRetainedSkipsBadRecords(t *testing.T) {
	db, ns := memStore(t)
	ret := func(topic string, typ, qos byte) []byte {
		m := storage.Message{ID: storage.RetainedKey + "_" + topic, T: storage.RetainedKey, TopicName: topic, Payload: []byte("p"),
			FixedHeader: packets.FixedHeader{Type: typ, Qos: qos, Retain: true}}
		return encodeMessage(&m)
	}
	b := ns.NewBatch()
	b.Put(idxRetained, retainedKey("a/1"), ret("a/1", packets.Publish, 2))
	b.Put(idxRetained, retainedKey("a/2"), ret("a/2", packets.Publish, 3))
	b.Put(idxRetained, retainedKey("a/3"), ret("a/3", packets.Puback, 1))
	b.Put(idxRetained, retainedKey("a/4"), ret("a/4", packets.Publish, 0))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	got, err := h.StoredRetainedMessages()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].TopicName != "a/1" || got[1].TopicName != "a/4" || h.Skipped() != 2 {
		t.Fatalf("retained: %+v, %d skipped; want a/1 and a/4, 2 skipped", got, h.Skipped())
	}
}

// TestMut_SessionExpiryCappedByTheServer guards clientOf's cap (records.go,
// "maxExpiry > 0 && expiry > maxExpiry"): the stored session expiry is the
// one the CONNACK granted, the client's asked for capped at the server's
// MaximumSessionExpiryInterval (none when that is 0), so that a restart
// does not keep a session longer than the server allows.
func TestMut_SessionExpiryCappedByTheServer(t *testing.T) {
	cl := &mqtt.Client{ID: "c"}
	cl.Properties.ProtocolVersion = 5
	cl.Properties.Props.SessionExpiryInterval = 1000
	cl.Properties.Props.SessionExpiryIntervalFlag = true
	for _, c := range []struct{ max, want uint32 }{{100, 100}, {1000, 1000}, {5000, 1000}, {0, 1000}} {
		if got := clientOf(cl, c.max).Properties.SessionExpiryInterval; got != c.want {
			t.Errorf("session expiry 1000 under a server maximum of %d: stored %d, want %d", c.max, got, c.want)
		}
	}
}

// TestMut_LoadOfPendingPublishes guards load's reading of the pending
// publishes (hook.go load): a pending-publish record of QoS 0 (which the
// hook never stores: nothing acks it) is malformed, skipped and counted,
// not published again; and the hook's sequence goes on after the highest
// pending one, so that a new publish does not overwrite a pending record.
func TestMut_LoadOfPendingPublishes(t *testing.T) {
	db, ns := memStore(t)
	pend := func(pid uint16, qos byte) []byte {
		m := storage.Message{T: pendingT, Client: "pub", Origin: "pub", TopicName: "p/x", PacketID: pid, Payload: []byte("x"),
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}}
		return encodeMessage(&m)
	}
	b := ns.NewBatch()
	b.Put(idxPending, pendingKey(5), pend(1, 1))
	b.Put(idxPending, pendingKey(9), pend(2, 2))
	b.Put(idxPending, pendingKey(12), pend(3, 0))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	var seqs []uint64
	for _, p := range h.replay {
		seqs = append(seqs, p.seq)
	}
	if len(seqs) != 2 || seqs[0] != 5 || seqs[1] != 9 || h.Skipped() != 1 {
		t.Fatalf("pending publishes loaded: %v, %d skipped; want 5 and 9, the QoS 0 one (12) skipped", seqs, h.Skipped())
	}
	h.mu.Lock()
	seq := h.mu.seq
	h.mu.Unlock()
	if seq < 9 {
		t.Fatalf("the hook's sequence after load: %d; want at least 9, the highest pending publish", seq)
	}
}

// publishOrder records the topics of the PUBLISHes the server processes.
type publishOrder struct {
	mqtt.HookBase
	mu     sync.Mutex
	topics []string
}

func (p *publishOrder) ID() string { return "publish-order" }

func (p *publishOrder) Provides(b byte) bool { return b == mqtt.OnPublish }

func (p *publishOrder) OnPublish(_ *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.topics = append(p.topics, pk.TopicName)
	return pk, nil
}

// TestMut_PendingPublishedAgainInOrder guards OnStarted's order (hook.go,
// sort by seq): the messages acknowledged before a restart and not yet
// handed to their subscribers are published again in the order they were
// acknowledged, so that a subscriber sees one publisher's messages in
// order (MQTT's ordering guarantee).
func TestMut_PendingPublishedAgainInOrder(t *testing.T) {
	db, ns := memStore(t)
	b := ns.NewBatch()
	for i, seq := range []uint64{3, 5, 8, 13} {
		m := storage.Message{T: pendingT, Client: "pub", Origin: "pub", TopicName: fmt.Sprintf("p/%d", seq), PacketID: uint16(i + 1),
			Payload: []byte("x"), FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}
		b.Put(idxPending, pendingKey(seq), encodeMessage(&m))
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: log})
	rec := new(publishOrder)
	if err := srv.AddHook(rec, nil); err != nil {
		t.Fatal(err)
	}
	h := new(Hook)
	if err := srv.AddHook(h, &Options{DB: db, Server: srv}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec.mu.Lock()
		got := append([]string(nil), rec.topics...)
		rec.mu.Unlock()
		if len(got) >= 4 || time.Now().After(deadline) {
			if want := []string{"p/3", "p/5", "p/8", "p/13"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("published again: %q, want %q", got, want)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after 10s for %s", what)
		}
	}
}

// TestMut_RefusedSubscriptionsAreNotStored guards OnSubscribed's skip of
// the filters the server refused (hook.go, "reasonCodes[i] > 2"): a
// filter granted no QoS (reason code 0x80 and above) is not stored, so a
// restart does not give the client a subscription it was refused.
func TestMut_RefusedSubscriptionsAreNotStored(t *testing.T) {
	db, ns := memStore(t)
	b := ns.NewBatch()
	b.Put(idxClients, clientKey("c"), marshal(&storage.Client{ID: "c", T: storage.ClientKey})) // a session's subscriptions only are handed out
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	cl := h.srv.NewClient(nil, "test", "c", false)
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "ok/#", Qos: 1}, {Filter: "refused/#", Qos: 1}, {Filter: "bad/#", Qos: 2}}}
	h.OnSubscribed(cl, pk, []byte{1, packets.ErrNotAuthorized.Code, packets.ErrUnspecifiedError.Code})
	var subs []storage.Subscription
	waitFor(t, "the granted subscription", func() bool {
		var err error
		subs, err = h.StoredSubscriptions()
		return err == nil && len(subs) > 0
	})
	if len(subs) != 1 || subs[0].Filter != "ok/#" || subs[0].Qos != 1 {
		t.Fatalf("stored subscriptions: %+v; want ok/# (QoS 1) alone", subs)
	}
	// Read back, a record of a refused filter would be skipped as
	// malformed (its "QoS" is the reason code): look at the keys.
	for _, f := range []string{"refused/#", "bad/#"} {
		if _, err := ns.Get(idxSubs, subKey("c", f)); err == nil {
			t.Errorf("a record stored for the refused filter %s", f)
		}
	}
}

// TestMut_TakenOverSessionKeepsItsRecord guards OnDisconnect's exception
// for a session taken over (hook.go, "cl.StopCause() ==
// packets.ErrSessionTakenOver"): when a new connection of the same client
// takes the session over, the old connection's end does not delete the
// client's record, which the new connection goes on with.
func TestMut_TakenOverSessionKeepsItsRecord(t *testing.T) {
	db, ns := memStore(t)
	b := ns.NewBatch()
	for _, id := range []string{"c", "d"} {
		b.Put(idxClients, clientKey(id), marshal(&storage.Client{ID: id, T: storage.ClientKey}))
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	old := h.srv.NewClient(nil, "test", "c", false)
	old.Stop(packets.ErrSessionTakenOver)
	h.OnDisconnect(old, packets.ErrSessionTakenOver, true)
	// A session that does end: its record goes, in a commit after the
	// first (commits take effect in order).
	other := h.srv.NewClient(nil, "test", "d", false)
	other.Stop(io.EOF)
	h.OnDisconnect(other, nil, true)
	has := func(id string) bool {
		_, err := ns.Get(idxClients, clientKey(id))
		return err == nil
	}
	waitFor(t, "the ended session's record to go", func() bool { return !has("d") })
	if !has("c") {
		t.Fatal("the record of a session taken over was deleted at its old connection's end")
	}
}

// TestMut_ExpiredSessionForgetsEverything guards OnClientExpired's
// removals (hook.go): an expired session's client record, its
// subscriptions and its inflight messages go together, another client's
// stay; before, a restart gave the expired session's subscriptions and
// messages back to the server.
func TestMut_ExpiredSessionForgetsEverything(t *testing.T) {
	db, ns := memStore(t)
	sub := func(client, filter string) []byte {
		return marshal(storage.Subscription{ID: client + ":" + filter, T: storage.SubscriptionKey, Client: client, Filter: filter, Qos: 1})
	}
	flight := func(client string, pid uint16) []byte {
		m := storage.Message{T: storage.InflightKey, Client: client, TopicName: "x", PacketID: pid, Payload: []byte("p"),
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}
		return encodeMessage(&m)
	}
	b := ns.NewBatch()
	for _, id := range []string{"c", "d"} {
		b.Put(idxClients, clientKey(id), marshal(&storage.Client{ID: id, T: storage.ClientKey}))
		b.Put(idxSubs, subKey(id, "a/#"), sub(id, "a/#"))
		b.Put(idxSubs, subKey(id, "b"), sub(id, "b"))
		b.Put(idxInflight, inflightKey(id, 1), flight(id, 1))
		b.Put(idxInflight, inflightKey(id, 7), flight(id, 7))
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	h.OnClientExpired(h.srv.NewClient(nil, "test", "c", false))
	has := func(index string, key []byte) bool {
		_, err := ns.Get(index, key)
		return err == nil
	}
	waitFor(t, "the expired client's record to go", func() bool { return !has(idxClients, clientKey("c")) })
	for _, k := range []struct {
		index string
		key   []byte
	}{{idxSubs, subKey("c", "a/#")}, {idxSubs, subKey("c", "b")}, {idxInflight, inflightKey("c", 1)}, {idxInflight, inflightKey("c", 7)}} {
		if has(k.index, k.key) {
			t.Errorf("%s %q of the expired session is still stored", k.index, k.key)
		}
	}
	for _, k := range []struct {
		index string
		key   []byte
	}{{idxClients, clientKey("d")}, {idxSubs, subKey("d", "a/#")}, {idxSubs, subKey("d", "b")}, {idxInflight, inflightKey("d", 1)}} {
		if !has(k.index, k.key) {
			t.Errorf("%s %q of another session is gone", k.index, k.key)
		}
	}
}

// TestMut_RetainedStoredWithoutDup guards OnRetainMessage's clearing of
// the DUP flag (hook.go, "m.FixedHeader.Dup = false"): the flag says a
// PUBLISH is a redelivery on one connection; the retained copy, sent to
// every later subscriber as a new message, is stored without it.
func TestMut_RetainedStoredWithoutDup(t *testing.T) {
	db, _ := memStore(t)
	h := initTestHook(t, db)
	cl := h.srv.NewClient(nil, "test", "pub", false)
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true, Dup: true},
		TopicName: "r/1", Payload: []byte("v"), PacketID: 3}
	h.srv.Topics.RetainMessage(pk.Copy(false)) // mochi's update before the event
	h.OnRetainMessage(cl, pk, 1)
	var got []storage.Message
	waitFor(t, "the retained message", func() bool {
		var err error
		got, err = h.StoredRetainedMessages()
		return err == nil && len(got) > 0
	})
	if len(got) != 1 || got[0].TopicName != "r/1" || !got[0].FixedHeader.Retain || got[0].FixedHeader.Dup {
		t.Fatalf("retained: %+v; want r/1, retain set, dup clear", got)
	}
}

// A session whose client record is skipped at load (malformed or damaged)
// is not handed to the server, and neither are its subscriptions: mochi
// would put them in its topic tree with no session, and a later client of
// that ID, told no session was present, would get messages on them. They
// are removed with the client record once mochi loaded the inflight
// messages (see TestHook_LoadRemovesWhatDamagedRecordsName).
func TestHook_SubscriptionsOfASkippedClientNotHandedOut(t *testing.T) {
	db, ns := memStore(t)
	sub := func(client, filter string) []byte {
		return marshal(storage.Subscription{ID: client + ":" + filter, T: storage.SubscriptionKey, Client: client, Filter: filter, Qos: 1})
	}
	b := ns.NewBatch()
	b.Put(idxClients, clientKey("bad"), []byte("not json"))
	b.Put(idxSubs, subKey("bad", "x/#"), sub("bad", "x/#"))
	b.Put(idxClients, clientKey("good"), marshal(&storage.Client{ID: "good", T: storage.ClientKey}))
	b.Put(idxSubs, subKey("good", "y/#"), sub("good", "y/#"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	clients, err := h.StoredClients()
	if err != nil {
		t.Fatal(err)
	}
	if len(clients) != 1 || clients[0].ID != "good" {
		t.Fatalf("clients: %+v; want good alone", clients)
	}
	subs, err := h.StoredSubscriptions()
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 1 || subs[0].Client != "good" {
		t.Fatalf("subscriptions: %+v; want good's alone", subs)
	}
	if n := h.Skipped(); n != 1 {
		t.Errorf("skipped %d records, want 1 (the client record)", n)
	}
	if _, err := h.StoredInflightMessages(); err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Get(idxSubs, subKey("bad", "x/#")); err == nil {
		t.Error("the subscription of the skipped client record is still stored")
	}
	if _, err := ns.Get(idxSubs, subKey("good", "y/#")); err != nil {
		t.Errorf("the good client's subscription: %v", err)
	}
}

// TestMut_NoRetainedReferenceWhenRetainUnavailable guards OnPublish's
// check of the server's capability (hook.go, "h.retainAvailable()"): a
// server that does not retain messages (RetainAvailable 0) calls no
// OnRetainMessage, so the retained reference the pending record's commit
// would write must not be written; it would retain, at the next start, a
// message the server never retained.
func TestMut_NoRetainedReferenceWhenRetainUnavailable(t *testing.T) {
	db, ns := memStore(t)
	h := initTestHook(t, db)
	h.srv.Options.Capabilities.RetainAvailable = 0
	cl := h.srv.NewClient(nil, "test", "pub", false)
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName: "r/1", Payload: []byte("v"), PacketID: 1, Origin: "pub", Created: time.Now().Unix()}
	pkx, err := h.OnPublish(cl, pk)
	if err != nil {
		t.Fatal(err)
	}
	// What a crash before the fan-out keeps: the commit the PUBACK waits
	// for.
	h.mu.Lock()
	c := h.mu.last["pub"].c
	h.mu.Unlock()
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if v, err := ns.Get(idxRetained, retainedKey("r/1")); err == nil {
		t.Fatalf("a server without retained messages: the store retains %q", v)
	}
	h.OnPublished(cl, pkx)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestMut_RejectedRetainedPublishLeavesNoReference guards finishLocked's
// repair of a retained reference no OnRetainMessage replaced (hook.go,
// "p.retWrote && !p.retSeen"): a retained publish that OnPublish stored
// and the server then did not take (a hook after this one rejected it)
// leaves the server's retained message of the topic stored, not a
// reference to a pending record that is removed.
func TestMut_RejectedRetainedPublishLeavesNoReference(t *testing.T) {
	db, ns := memStore(t)
	h := initTestHook(t, db)
	kept := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName: "r/1", Payload: []byte("kept"), Origin: "earlier", Created: 1}
	h.srv.Topics.RetainMessage(kept)
	cl := h.srv.NewClient(nil, "test", "pub", false)
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName: "r/1", Payload: []byte("rejected"), PacketID: 1, Origin: "pub", Created: time.Now().Unix()}
	pkx, err := h.OnPublish(cl, pk)
	if err != nil {
		t.Fatal(err)
	}
	h.OnPacketProcessed(cl, pkx, packets.ErrRejectPacket)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	v, err := ns.Get(idxRetained, retainedKey("r/1"))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := decodeMessage(v, "retained"); err != nil || string(m.Payload) != "kept" {
		t.Fatalf("retained record %q (%v); want the server's retained message, kept", v, err)
	}
	if _, err := ns.Get(idxPending, pendingKey(1)); err == nil {
		t.Fatal("the pending record of the rejected publish is still stored")
	}
}

// TestMut_RetainedReferenceResolvedForItsOwnPublishOnly guards load's
// match of a retained reference to its pending publish (hook.go,
// "ref == seq") and StoredRetainedMessages' removal of a reference to
// no stored publish: a reference is resolved from the pending publish it
// names only (not from another retained publish of the topic), and one
// naming a publish not stored is skipped, counted and removed.
func TestMut_RetainedReferenceResolvedForItsOwnPublishOnly(t *testing.T) {
	db, ns := memStore(t)
	pend := func(topic, payload string, pid uint16) []byte {
		m := storage.Message{T: pendingT, Client: "pub", Origin: "pub", TopicName: topic, PacketID: pid, Payload: []byte(payload),
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true}}
		return encodeMessage(&m)
	}
	b := ns.NewBatch()
	b.Put(idxPending, pendingKey(3), pend("a", "a3", 1))
	b.Put(idxRetained, retainedKey("a"), encodeRetainedRef(3))
	b.Put(idxPending, pendingKey(4), pend("b", "b4", 2))
	b.Put(idxRetained, retainedKey("b"), encodeRetainedRef(2)) // pending 2 is not stored
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	got, err := h.StoredRetainedMessages()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].TopicName != "a" || string(got[0].Payload) != "a3" || h.Skipped() != 1 {
		t.Fatalf("retained: %+v, %d skipped; want a=a3 alone, b's reference skipped", got, h.Skipped())
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if v, err := ns.Get(idxRetained, retainedKey("b")); err == nil {
		t.Errorf("the reference to a publish not stored is still stored: %q", v)
	}
}

// Two hooks on one store each numbered their pending publishes from the
// store's highest and kept what was stored in their own memory, so their
// "pub" records shared keys and one overwrote the other's: acknowledged
// messages were lost after a kill -9 (an outside tester's two servers in
// one process on one kdb.DB). Init now refuses a second live hook on a
// store (kdb.ErrInvalid), until the first stops; another store is not
// held up.
func TestHook_OneHookPerStore(t *testing.T) {
	db, _ := memStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	add := func(db *kdb.DB) (*mqtt.Server, *Hook, error) {
		srv := mqtt.New(&mqtt.Options{Logger: log})
		h := new(Hook)
		return srv, h, srv.AddHook(h, &Options{DB: db, Server: srv})
	}
	srv1, _, err := add(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := add(db); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("a second hook on a store whose hook is live: %v; want an error wrapping kdb.ErrInvalid", err)
	}
	other, _ := memStore(t)
	srvO, _, err := add(other)
	if err != nil {
		t.Fatalf("a hook on another store: %v", err)
	}
	defer srvO.Close()
	if err := srv1.Close(); err != nil { // stops its hook
		t.Fatal(err)
	}
	srv2, h2, err := add(db)
	if err != nil {
		t.Fatalf("a hook on a store whose hook stopped: %v", err)
	}
	defer srv2.Close()
	for i := 0; i < 2; i++ { // a refused Init releases nothing
		if _, _, err := add(db); !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("hook %d while the second is live: %v; want an error wrapping kdb.ErrInvalid", 3+i, err)
		}
	}
	if err := h2.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, h3, err := add(db); err != nil {
		t.Fatalf("a hook after the second stopped: %v", err)
	} else if err := h3.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestMut_QoS2PublishStoresItsPubrec guards OnPublish's PUBREC record
// (hook.go, "tx.Put(idxInflight, ikey, rel)"): an inbound QoS 2 PUBLISH
// stores, with its pending record, the PUBREC state of its packet ID,
// which mochi loads at a restart; without it the publisher's resend of
// the PUBLISH (DUP, same packet ID) after a restart is a new message,
// delivered a second time.
func TestMut_QoS2PublishStoresItsPubrec(t *testing.T) {
	db, ns := memStore(t)
	if err := ns.Update(func(tx *kdb.Txn) error {
		return tx.Put(idxClients, clientKey("pub"), marshal(&storage.Client{ID: "pub", T: storage.ClientKey}))
	}); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	cl := h.srv.NewClient(nil, "test", "pub", false)
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2},
		TopicName: "q/2", Payload: []byte("once"), PacketID: 7, Origin: "pub", Created: time.Now().Unix()}
	pkx, err := h.OnPublish(cl, pk)
	if err != nil {
		t.Fatal(err)
	}
	h.OnPublished(cl, pkx) // no subscriber: the fan-out removes the pending record only
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	h2 := initTestHook(t, db) // the restart
	defer h2.Stop()
	if len(h2.replay) != 0 {
		t.Fatalf("published again after the restart: %+v; want nothing (the fan-out was committed)", h2.replay)
	}
	got, err := h2.StoredInflightMessages()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Client != "pub" || got[0].PacketID != 7 || got[0].FixedHeader.Type != packets.Pubrec {
		t.Fatalf("inflight after the restart: %+v; want pub's PUBREC state of packet 7", got)
	}
}

// TestMut_V311CleanSessionTakenOverIsReset guards OnSessionEstablish's
// reset of an MQTT 3.1.1 clean session (hook.go, "old.Properties.Clean &&
// old.Properties.ProtocolVersion < 5"): mochi discards a live 3.1.1 clean
// session taken over even by a connection without clean session
// (inheritClientSession), so the stored subscriptions and inflight
// messages go in the commit of the new session record; an MQTT 5 session
// with clean start is resumed, and keeps them.
func TestMut_V311CleanSessionTakenOverIsReset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		old   byte // the live session's protocol version (clean set)
		reset bool
	}{
		{"3.1.1 clean session", 4, true},
		{"5 clean start", 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, ns := memStore(t)
			m := storage.Message{T: storage.InflightKey, Client: "c", TopicName: "x", PacketID: 3, Payload: []byte("p"),
				FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}
			b := ns.NewBatch()
			b.Put(idxClients, clientKey("c"), marshal(&storage.Client{ID: "c", T: storage.ClientKey}))
			b.Put(idxSubs, subKey("c", "a/#"), marshal(storage.Subscription{ID: "c:a/#", T: storage.SubscriptionKey, Client: "c", Filter: "a/#", Qos: 1}))
			b.Put(idxInflight, inflightKey("c", 3), encodeMessage(&m))
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			h := initTestHook(t, db)
			defer h.Stop()
			old := h.srv.NewClient(nil, "test", "c", false)
			old.Properties.Clean, old.Properties.ProtocolVersion = true, tc.old
			h.srv.Clients.Add(old)
			cl := h.srv.NewClient(nil, "test", "c", false)
			cl.Properties.ProtocolVersion = tc.old
			h.OnSessionEstablish(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
				ProtocolVersion: tc.old, Connect: packets.ConnectParams{ClientIdentifier: "c"}})
			h.mu.Lock()
			c := h.mu.last["c"].c
			h.mu.Unlock()
			if c == nil {
				t.Fatal("OnSessionEstablish wrote nothing for the CONNACK to wait for")
			}
			if err := c.Wait(); err != nil {
				t.Fatal(err)
			}
			for _, k := range []struct {
				index string
				key   []byte
			}{{idxSubs, subKey("c", "a/#")}, {idxInflight, inflightKey("c", 3)}} {
				if _, err := ns.Get(k.index, k.key); tc.reset != errors.Is(err, kdb.ErrNotFound) {
					t.Errorf("%s %q after the takeover: %v; want removed: %v", k.index, k.key, err, tc.reset)
				}
			}
		})
	}
}

// TestMut_RetainedExpiredRemoved guards OnRetainedExpired's removal
// (hook.go): a retained message whose expiry interval passed is removed
// from the store, so that a restart does not retain it again.
func TestMut_RetainedExpiredRemoved(t *testing.T) {
	db, ns := memStore(t)
	ret := func(topic string) []byte {
		m := storage.Message{T: storage.RetainedKey, Client: "pub", Origin: "pub", TopicName: topic, Payload: []byte("v"),
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true}}
		return encodeMessage(&m)
	}
	b := ns.NewBatch()
	b.Put(idxRetained, retainedKey("r/1"), ret("r/1"))
	b.Put(idxRetained, retainedKey("r/2"), ret("r/2"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	h := initTestHook(t, db)
	h.OnRetainedExpired("r/1")
	if err := h.Stop(); err != nil { // waits for the commits in flight
		t.Fatal(err)
	}
	if v, err := ns.Get(idxRetained, retainedKey("r/1")); !errors.Is(err, kdb.ErrNotFound) {
		t.Errorf("the expired retained message: %q, %v; want it removed", v, err)
	}
	if _, err := ns.Get(idxRetained, retainedKey("r/2")); err != nil {
		t.Errorf("another retained message: %v", err)
	}
}
