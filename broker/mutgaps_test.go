package broker_test

// Tests for breakages of broker/ackasync.go and broker/read.go that the
// default suite did not catch (an outside mutation hunt, 2026-12-08).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// An AckAsync refused by the engine (here: called inside an Update's
// function, where Defer is ErrInvalid) must leave nothing behind: the
// same message can be acked asynchronously afterwards.
func TestAckAsync_RefusedLeavesTheMessageAckable(t *testing.T) {
	b := openBroker(t, vfs.NewMem())
	seq := mustSend(t, b, broker.Queue, "q", msg("a", "", 0, "x"))
	err := b.DB().Update(func(tx *kdb.Txn) error {
		if err := b.AckAsync(broker.Queue, "q", seq); err == nil {
			t.Errorf("AckAsync inside an Update's function: nil, want an error")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AckAsync(broker.Queue, "q", seq); err != nil {
		t.Fatalf("AckAsync after a refused one: %v, want nil (the message is there and was never acked)", err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(broker.Queue, "q"); err != nil || d.Count != 0 {
		t.Fatalf("after AckAsync and Sync: %+v, %v; want 0 messages", d, err)
	}
}

// Read over a damaged index page must fail (kdb.ErrCorrupt), not return
// the messages before the damage as if they were all.
func TestRead_OverADamagedPageIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := 1; i <= n; i++ {
		body := fmt.Sprintf("body-%05d-%s", i, bytes.Repeat([]byte("y"), 60))
		if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: fmt.Sprint(i), Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Flip a byte in the page holding a late message's body.
	p := filepath.Join(dir, "db.data")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte(fmt.Sprintf("body-%05d", n-10)))
	if i < 0 {
		t.Fatal("body not found in db.data")
	}
	data[i] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err = broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := b.Read(broker.Queue, "q", 0, n)
	if !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("Read over a damaged page: %d messages, err %v; want kdb.ErrCorrupt", len(ms), err)
	}
}
