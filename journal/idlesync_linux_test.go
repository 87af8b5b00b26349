package journal

import (
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// cpuTime is the process's CPU time so far (user and system).
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSyncInterval_IdleJournalCostsNoCPU: under SyncInterval with a tiny
// interval, a journal that nothing writes to burns no CPU. Its syncer used
// to be a free-running ticker: at 1 ns it kept a core busy (0.66-0.98 s of
// CPU per idle second) on a store that did nothing.
func TestSyncInterval_IdleJournalCostsNoCPU(t *testing.T) {
	for _, iv := range []time.Duration{time.Nanosecond, time.Microsecond} {
		j, _ := openMem(t, vfs.NewMem(), Options{Sync: SyncInterval, SyncInterval: iv})
		if _, err := j.Append(Record{Type: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the write's sync is done
		const idle = 300 * time.Millisecond
		c0 := cpuTime(t)
		time.Sleep(idle)
		used := cpuTime(t) - c0
		mustClose(t, j)
		// The old ticker used most of a core here; an idle process uses
		// well under 1%. A quarter of the idle time leaves room for a
		// loaded machine's noise.
		if used > idle/4 {
			t.Errorf("SyncInterval %v: %v of CPU in %v with nothing written", iv, used, idle)
		}
	}
}
