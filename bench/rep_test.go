package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kdb-project/kdb"
)

func TestReportBreakdown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	for range 3 {
		os.RemoveAll(dir)
		CrashWithJournal(t, dir, 64<<20)
		db, err := kdb.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := db.Recovery()
		fmt.Printf("pf=%v journal=%v replay=%v ck=%v total=%v bytes=%d recs=%d\n", r.PageFileTime, r.JournalTime, r.ReplayTime, r.CheckpointTime, r.TotalTime, r.BytesReplayed, r.RecordsReplayed)
		db.Close()
	}
}
