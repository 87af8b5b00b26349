package kdb

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// TestYield_AnOSStallDoesNotStopTheYields: a leader on one P stops yielding
// for a second when a yield ran some goroutine of the program for a whole
// time slice, but not when the round was slow because the OS took the
// thread away (another process, a CPU quota): that happened under a loaded
// CI machine's other test processes, and the leader then lingered as with
// more Ps, its groups shrinking to a few writers (TestDB_GroupCommitOneP
// failed one run in five beside two spinning processes). Here the hook
// stalls a yield, as the OS would: once, and the yield after it is quick
// (the yields go on); twice in a row, as a CPU-bound goroutine makes every
// yield (they stop).
func TestYield_AnOSStallDoesNotStopTheYields(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var stalls atomic.Int32 // the next yields to stall
	testHookYielded = func() {
		if stalls.Load() > 0 {
			stalls.Add(-1)
			time.Sleep(2 * yieldSlow)
		}
	}
	defer func() { testHookYielded = nil }()
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stopped := func() bool {
		db.cq.mu.Lock()
		defer db.cq.mu.Unlock()
		return time.Now().Before(db.cq.mu.noYieldUntil)
	}
	puts := 0
	put := func() {
		t.Helper()
		if err := db.Put("a", fmt.Appendf(nil, "k%04d", puts), []byte("v")); err != nil {
			t.Fatal(err)
		}
		puts++
	}
	restart := func() {
		db.cq.mu.Lock()
		db.cq.mu.noYieldUntil = time.Time{}
		db.cq.mu.Unlock()
	}
	// The two phases below assert that the yields go on, and a loaded
	// machine can itself make two yields in a row slow (the OS taking the
	// thread for longer than yieldSlow, twice): each phase gets attempts,
	// and fails only if the yields stopped in every one. A leader that
	// stops on what it must not stops every time.
	const attempts = 5
	ok := false
	for range attempts {
		restart()
		for range 10 {
			put()
		}
		if ok = !stopped(); ok {
			break
		}
	}
	if !ok {
		t.Fatal("the yields stopped with nothing slow")
	}
	ok = false
	for range attempts {
		restart()
		stalls.Store(1)
		for range 10 {
			put()
		}
		if stalls.Load() != 0 {
			t.Fatal("no yield ran: a lone writer on one P yields once per commit")
		}
		if ok = !stopped(); ok {
			break
		}
	}
	if !ok {
		t.Fatal("one stalled yield (the OS's doing, the next yield quick) stopped the yields")
	}
	restart()
	stalls.Store(2)
	for range 10 {
		put()
	}
	if !stopped() {
		t.Fatal("two stalled yields in a row (a CPU-bound goroutine's doing) did not stop the yields")
	}
}
