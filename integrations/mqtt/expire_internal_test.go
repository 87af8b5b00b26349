package kdbmqtt

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
)

// An expired session with more subscriptions than one commit can remove
// (2,500 filters of 280 bytes on a store whose MaxBatchSize is 256 KiB) is
// removed whole, in as many commits as it takes: it used to be one commit,
// which the store refused, so nothing was removed, and the same again at
// every later expiry.
func TestHook_ExpiredSessionWithManySubscriptions(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ns, err := db.Namespace(Namespace)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2500
	b := ns.NewBatch()
	b.Put(idxClients, clientKey("c"), marshal(&storage.Client{ID: "c", T: storage.ClientKey}))
	for i := 0; i < n; i++ {
		f := fmt.Sprintf("f/%d/", i)
		f += strings.Repeat("x", 280-len(f))
		b.Put(idxSubs, subKey("c", f), marshal(storage.Subscription{ID: "c:" + f, T: storage.SubscriptionKey, Client: "c", Filter: f, Qos: 1}))
		if b.Len() == 200 || i == n-1 {
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			b = ns.NewBatch()
		}
	}
	h := initTestHook(t, db)
	h.OnClientExpired(h.srv.NewClient(nil, "test", "c", false))
	if err := h.Stop(); err != nil { // waits for the commits
		t.Fatal(err)
	}
	var subs, clients uint64
	err = ns.View(func(s *kdb.Snapshot) error {
		var err error
		if subs, err = s.Len(idxSubs); err != nil {
			return err
		}
		clients, err = s.Len(idxClients)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if subs != 0 || clients != 0 {
		t.Errorf("after the session expired: %d subscription records and %d client records, want none", subs, clients)
	}
}
