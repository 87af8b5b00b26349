package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// liveWriter keeps a store busy: random puts and deletes (some values kept
// in the journal), broker sends and acks, small journal segments (so that
// checkpoints remove segments), and a checkpoint every few milliseconds on
// top of the ones the small CheckpointBytes and CheckpointDirtyPages start.
type liveWriter struct {
	db          *kdb.DB
	stop        chan struct{}
	wg          sync.WaitGroup
	writes      atomic.Int64
	checkpoints atomic.Int64
	mu          sync.Mutex
	err         error
}

func startLiveWriter(t *testing.T, dir string) *liveWriter {
	t.Helper()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 64 << 10, CheckpointBytes: 32 << 10,
		CheckpointDirtyPages: 256, CheckpointInterval: 5 * time.Millisecond, ValueThreshold: 200,
		Sync: kdb.UnsafeSyncNever})
	if err != nil {
		t.Fatal(err)
	}
	br, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	w := &liveWriter{db: db, stop: make(chan struct{})}
	fail := func(err error) {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	// Seed enough keys that the trees are a few levels deep.
	b := kdb.NewBatch()
	for i := 0; i < 1500; i++ {
		b.Put("live", []byte(fmt.Sprintf("k%06d", i)), bytes.Repeat([]byte{byte(i)}, 40))
		if b.Len() == 200 {
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	if err := br.Subscribe("livet", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	w.wg.Add(3)
	go func() { // index writes
		defer w.wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		for n := 0; ; n++ {
			select {
			case <-w.stop:
				return
			default:
			}
			b := kdb.NewBatch()
			for i := 0; i < 20; i++ {
				k := []byte(fmt.Sprintf("k%06d", r.IntN(3000)))
				switch x := r.IntN(10); {
				case x < 3:
					b.Delete("live", k)
				case x < 5:
					b.Put("live", k, bytes.Repeat([]byte{byte(n)}, 300+r.IntN(700))) // in the journal
				default:
					b.Put("live", k, bytes.Repeat([]byte{byte(n)}, 10+r.IntN(100)))
				}
			}
			if err := db.Write(b); err != nil {
				fail(err)
				return
			}
			w.writes.Add(1)
			time.Sleep(time.Millisecond) // keep the store small, the checks quick
		}
	}()
	go func() { // broker traffic, acked soon after, so that the store stays small
		defer w.wg.Done()
		var lastQ, lastT uint64
		for n := 0; ; n++ {
			select {
			case <-w.stop:
				return
			default:
			}
			q, err := br.Send(broker.Queue, "liveq", &broker.Message{ID: fmt.Sprintf("q%d", n), Body: bytes.Repeat([]byte("b"), 50+n%400)})
			var tq uint64
			if err == nil {
				tq, err = br.Send(broker.Topic, "livet", &broker.Message{ID: fmt.Sprintf("t%d", n), Body: []byte("event")})
			}
			if err == nil && lastQ != 0 {
				err = br.Ack(broker.Queue, "liveq", lastQ)
			}
			if err == nil && lastT != 0 {
				err = br.AckSub("livet", "s1", lastT)
			}
			if err != nil {
				fail(err)
				return
			}
			lastQ, lastT = q, tq
			time.Sleep(time.Millisecond)
		}
	}()
	go func() { // explicit checkpoints
		defer w.wg.Done()
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := db.Checkpoint(); err != nil {
				fail(err)
				return
			}
			w.checkpoints.Add(1)
		}
	}()
	return w
}

// close stops the writer and closes its store; it fails t if a write failed.
func (w *liveWriter) close(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	if err := w.db.Close(); err != nil {
		t.Errorf("writer close: %v", err)
	}
	if w.err != nil {
		t.Errorf("writer: %v", w.err)
	}
}

// liveRuns is how many read-only runs of each tool a live-store test does:
// n by default, a tenth of it with -short (CI runs -race -short), ten times
// as many with KDB_LONG=1.
func liveRuns(n int) int {
	switch {
	case os.Getenv("KDB_LONG") == "1":
		return 10 * n
	case testing.Short():
		return n / 10
	}
	return n
}

// TestReadOnly_CheckUnderLiveCheckpointsNoFalseReports runs kdbtool check
// again and again against a store that another handle writes and
// checkpoints all the time: the checks' page reads race with the
// checkpoints' in-place writes and journal GC, and none may report damage.
// A few runs are real child processes (another process mapping db.data).
func TestReadOnly_CheckUnderLiveCheckpointsNoFalseReports(t *testing.T) {
	dir := t.TempDir()
	w := startLiveWriter(t, dir)
	defer w.close(t)
	runs := liveRuns(200)
	false_ := 0
	for i := 0; i < runs; i++ {
		var code int
		var out, errs string
		if i%50 == 49 || i == runs-1 {
			code, out, errs = runChild(t, "check", dir)
		} else {
			code, out, errs = runTool(t, "check", dir)
		}
		if code != exitOK {
			false_++
			if false_ <= 5 {
				t.Errorf("check run %d: exit %d\n%s%s", i, code, out, errs)
			}
		}
	}
	t.Logf("%d check runs, %d false reports, while the writer did %d batches and %d explicit checkpoints",
		runs, false_, w.writes.Load(), w.checkpoints.Load())
	if false_ > 0 {
		t.Errorf("%d of %d check runs reported damage that is not there", false_, runs)
	}
}

// TestReadOnly_ToolsUnderLiveCheckpointsNoFalseReports does the same for
// inspect, dump and export, fewer times each.
func TestReadOnly_ToolsUnderLiveCheckpointsNoFalseReports(t *testing.T) {
	dir := t.TempDir()
	w := startLiveWriter(t, dir)
	defer w.close(t)
	runs := liveRuns(100)
	exp := filepath.Join(t.TempDir(), "snap")
	tools := [][]string{
		{"inspect", dir},
		{"dump", "--index", "live", "--limit", "0", "--values", dir},
		{"dump", "--queue", "liveq", "--limit", "0", dir},
		{"export", dir, exp},
	}
	false_ := 0
	for i := 0; i < runs; i++ {
		for _, args := range tools {
			code, out, errs := runTool(t, args...)
			if code != exitOK {
				false_++
				if false_ <= 5 {
					t.Errorf("%s run %d: exit %d\n%s%s", args[0], i, code, out, errs)
				}
			}
		}
	}
	t.Logf("%d runs of each of %d tools, %d false reports, while the writer did %d batches and %d explicit checkpoints",
		runs, len(tools), false_, w.writes.Load(), w.checkpoints.Load())
	if false_ > 0 {
		t.Errorf("%d runs reported damage that is not there", false_)
	}
}

// runChild runs the test binary as kdbtool in a child process.
func runChild(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// dump --limit 0 lists every message of a queue (it used to loop forever:
// the page size computed from the largest int overflowed).
func TestDump_QueueLimitZeroListsAll(t *testing.T) {
	dir := makeStore(t, 10)
	code, m := runJSON(t, "dump", "--json", "--queue", "orders", "--limit", "0", dir)
	if code != 0 {
		t.Fatalf("dump --limit 0: exit %d", code)
	}
	if msgs := m["messages"].([]any); len(msgs) != 5 {
		t.Errorf("dump --limit 0: %d messages, want 5", len(msgs))
	}
}
