package kdbmqtt_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
	"github.com/kdb-project/kdb/vfs"
)

// The in-process brokers' store has 1 MiB segments: DB.MaxBatchSize is
// 256 KiB. Removing 2,500 subscriptions with filters of 280 bytes, or
// 2,500 inflight messages of a client whose ID has 190 bytes, takes more
// than that in one commit (each removal's key is as long), so these tests
// reach the hook's paths that must split what it writes.
const bigN = 2500

// longID is a client ID of 190 bytes (a key part up to 200 is kept as it
// is, not hashed).
var longID = "s-" + strings.Repeat("i", 188)

func longFilter(i int) string {
	f := fmt.Sprintf("f/%d/", i)
	return f + strings.Repeat("x", 280-len(f))
}

// countIndex returns the number of records in one of the hook's indexes
// (doc.go lists them: "sub", "if", ...) of the store in dir on fs.
func countIndex(t *testing.T, fs vfs.FS, dir, index string) int {
	t.Helper()
	db, err := kdb.Open(dir, &kdb.Options{FS: fs, SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	}()
	ns, err := db.Namespace(kdbmqtt.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	err = ns.View(func(s *kdb.Snapshot) error {
		var err error
		n, err = s.Len(index)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// A persistent session with more inflight messages than one commit can
// remove resumes with clean start: mochi drops them all (OnQosDropped for
// each). Their removal is written, in as many commits as it takes: after a
// restart none of them is delivered again.
func TestHook_CleanStartDropsManyInflight(t *testing.T) {
	fs := vfs.NewMem()
	b := startInProc(t, fs, "store")
	s := mustDial(t, b.addr, connOpts{id: longID, cleanStart: true, expiry: 3600})
	s.subscribe(t, 1, "q")
	s.close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := mustDial(t, b.addr, connOpts{id: "pub", cleanStart: true})
	for i := 0; i < bigN; i++ {
		if err := pub.publish(ctx, "q", 1, false, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	pub.close()
	b.close(t) // the hook's Stop waits for the fan-outs
	if n := countIndex(t, fs, "store", "if"); n != bigN {
		t.Fatalf("%d inflight records stored for the offline session, want %d", n, bigN)
	}

	b = startInProc(t, fs, "store")
	s2, err := dial(ctx, b.addr, connOpts{id: longID, cleanStart: true, expiry: 3600})
	if err != nil {
		t.Fatalf("the session's clean-start reconnect was refused: %v", err)
	}
	s2.close()
	b.close(t)
	if n := countIndex(t, fs, "store", "if"); n != 0 {
		t.Errorf("%d inflight records left after the clean start dropped them all, want 0", n)
	}

	b = startInProc(t, fs, "store")
	s3 := mustDial(t, b.addr, connOpts{id: longID, cleanStart: false, expiry: 3600})
	if got := s3.waitQuiet(1, 300*time.Millisecond, 2*time.Second); len(got) != 0 {
		t.Errorf("after the restart the session got %d messages its clean start had discarded", len(got))
	}
}
