package kdbmqtt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
	"github.com/kdb-project/kdb/vfs"
)

// Two clients set and clear the same retained topic at the same time.
// mochi updates its retained message, then calls OnRetainMessage, with no
// lock between the two: the hook's calls can come in the other order than
// the updates. The stored retained message must always end as mochi's (a
// restart loads it): a message cleared must not come back, and an older
// one must not replace the newer.
func TestHook_RetainedSetAndClearRace(t *testing.T) {
	fs := vfs.NewMem()
	b := startInProc(t, fs, "store")
	ns, err := b.db.Namespace(kdbmqtt.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	setter := mustDial(t, b.addr, connOpts{id: "setter", cleanStart: true})
	clearer := mustDial(t, b.addr, connOpts{id: "clearer", cleanStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const rounds = 300
	diverged := 0
	for i := 0; i < rounds && diverged == 0; i++ {
		var wg sync.WaitGroup
		var e1, e2 error
		wg.Add(2)
		go func() { defer wg.Done(); e1 = setter.publish(ctx, "r", 1, true, []byte(fmt.Sprint("v", i))) }()
		go func() { defer wg.Done(); e2 = clearer.publish(ctx, "r", 1, true, nil) }()
		wg.Wait()
		if err := errors.Join(e1, e2); err != nil {
			t.Fatal(err)
		}
		var mem []byte
		if pk, ok := b.srv.Topics.Retained.Get("r"); ok {
			mem = pk.Payload
		}
		// Both acks were sent: their writes are applied.
		v, err := ns.Get("ret", []byte("r"))
		var stored []byte
		switch {
		case errors.Is(err, kdb.ErrNotFound):
		case err != nil:
			t.Fatal(err)
		default:
			stored = v
		}
		if (mem == nil) != (stored == nil) || (mem != nil && !bytes.Contains(stored, mem)) {
			diverged++
			t.Errorf("round %d: the server retains %q, the store holds a record of %d bytes (%q)", i, mem, len(stored), stored)
		}
	}
}
