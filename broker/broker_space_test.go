package broker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// dirSize returns the bytes of the journal segments in dir and of its other
// files.
func dirSize(t testing.TB, dir string) (journal, other int64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && !fi.IsDir() {
			if filepath.Ext(e.Name()) == ".log" {
				journal += fi.Size()
			} else {
				other += fi.Size()
			}
		}
	}
	return journal, other
}

// TestBroker_SpaceBounded sends messages through a queue and acks all but 1
// in every `rare`: the never-acked bodies stay live in the journal, spread
// over its whole history. Compaction keeps the pinned journal segments (those
// before the replay position, kept only for live values) within
// compactFactor (4) times the live bytes plus one checkpoint interval, at
// every sample; the whole store stays within that plus the journal written
// since the last checkpoint (CheckpointBytes), the active segment and
// db.data. See the root package's compact.go for the bound.
//
// Default: 200,000 messages, 1 in 10,000 never acked (20 live). KDB_LONG=1:
// 2,000,000 messages, 1 in 100,000 never acked (the figure).
// 64 KiB segments, 256-byte bodies kept in the journal (ValueThreshold 128),
// checkpoints every 512 KiB of journal; fsync off (space is measured, not
// durability).
//
// The "dense" case keeps 1 message in 8 (50,000 sent), so that the live data
// is large against the checkpoint interval and the factor itself shows: it
// logs journal/live.
func TestBroker_SpaceBounded(t *testing.T) {
	total, rare := 200_000, 10_000
	if os.Getenv("KDB_LONG") == "1" {
		total, rare = 2_000_000, 100_000
	}
	if testing.Short() {
		total, rare = 50_000, 2_500
	}
	t.Run(fmt.Sprintf("sparse/total=%d/rare=%d", total, rare), func(t *testing.T) { spaceRun(t, total, rare) })
	t.Run("dense/total=50000/rare=8", func(t *testing.T) { spaceRun(t, 50_000, 8) })
}

func spaceRun(t *testing.T, total, rare int) {
	const segSize, ckBytes = 64 << 10, 512 << 10
	dir := filepath.Join(t.TempDir(), "db")
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: segSize, ValueThreshold: 128, CheckpointBytes: ckBytes,
		Sync: kdb.UnsafeSyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	b := openOn(t, db)
	body := make([]byte, 256)
	for i := range body {
		body[i] = byte(i)
	}
	var (
		maxDisk, maxPinned, worstExcess int64
		maxJournal, maxOther            int64
		worstJournalExcess              int64
		live, sent, lastCk              int64
		seqs                            []uint64
	)
	sample := func() {
		d, err := b.Destination(broker.Queue, "q")
		if err != nil {
			t.Fatal(err)
		}
		live = int64(d.Bytes)
		st := db.Stats()
		j, o := dirSize(t, dir)
		maxDisk = max(maxDisk, j+o)
		maxJournal, maxOther = max(maxJournal, j), max(maxOther, o)
		if ex := j - (4*live + 3*ckBytes + 3*segSize); ex > worstJournalExcess {
			worstJournalExcess = ex
		}
		maxPinned = max(maxPinned, st.PinnedBytes)
		// The bound (compact.go): pinned <= 4 x live + CheckpointBytes
		// + 2 segments.
		if ex := st.PinnedBytes - (4*live + ckBytes + 2*segSize); ex > worstExcess {
			worstExcess = ex
		}
	}
	// Producers send in transactions of 10 messages; the consumer acks
	// 100 at a time.
	const txSize = 10
	for i := 1; i <= total; i += txSize {
		tx := b.BeginTx()
		ms := make([]*broker.Message, 0, txSize)
		for j := i; j < i+txSize && j <= total; j++ {
			m := &broker.Message{ID: fmt.Sprint("m", j), ProducerID: "p", ProducerSeq: uint64(j), Body: body}
			ms = append(ms, m)
			if err := tx.Send(broker.Queue, "q", m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for k, m := range ms {
			sent += int64(len(body))
			if (i+k)%rare != 0 { // 1 in rare is never acked
				seqs = append(seqs, m.Seq)
			}
		}
		if len(seqs) >= 100 {
			if err := b.Ack(broker.Queue, "q", seqs...); err != nil {
				t.Fatal(err)
			}
			seqs = seqs[:0]
		}
		if (i-1)%100 == 0 {
			// The bound holds while checkpoints keep pace with
			// CheckpointBytes; the background checkpointer may lag on a
			// loaded machine (under -race, say), so the test paces them.
			if jb := db.Stats().JournalBytes; jb-lastCk >= ckBytes {
				if err := db.Checkpoint(); err != nil {
					t.Fatal(err)
				}
				lastCk = jb
			}
		}
		if (i-1)%5000 == 0 {
			sample()
		}
	}
	if err := b.Ack(broker.Queue, "q", seqs...); err != nil {
		t.Fatal(err)
	}
	sample()
	st := db.Stats()
	d, _ := b.Destination(broker.Queue, "q")
	t.Logf("%d messages (%d MiB of bodies) sent, %d never acked (%d live bytes); max disk %d KiB, max pinned %d KiB, now pinned %d segments (%d KiB); %d compaction passes moved %d values; %d segments removed",
		total, sent>>20, d.Count, d.Bytes, maxDisk>>10, maxPinned>>10, st.PinnedSegments, st.PinnedBytes>>10, st.Compactions, st.CompactedValues, st.SegmentsRemoved)
	j, o := dirSize(t, dir)
	if live > 0 {
		t.Logf("journal/live: now %.2f, max %.2f (max journal over 4 x live: %d KiB)", float64(j)/float64(live), float64(maxJournal)/float64(live), (maxJournal-4*live)>>10)
	}
	t.Logf("now: journal %d KiB, other files %d KiB; max journal %d KiB, max other %d KiB", j>>10, o>>10, maxJournal>>10, maxOther>>10)
	if d.Count != uint64(total/rare) {
		t.Fatalf("%d messages left, want %d", d.Count, total/rare)
	}
	if worstExcess > 0 {
		t.Fatalf("pinned journal exceeded 4 x live + CheckpointBytes + 2 segments by %d bytes", worstExcess)
	}
	if worstJournalExcess > 0 {
		t.Fatalf("journal exceeded 4 x live + 3 x CheckpointBytes + 3 segments by %d bytes", worstJournalExcess)
	}
	// db.data, db.redo, db.free: the index of the messages in flight.
	if maxOther > 4<<20 {
		t.Fatalf("page file reached %d bytes", maxOther)
	}
	if err := checkStore(b); err != nil {
		t.Fatal(err)
	}
	ms, err := b.Read(broker.Queue, "q", 0, total/rare+1)
	if err != nil || len(ms) != total/rare || string(ms[0].Body) != string(body) {
		t.Fatalf("never-acked messages: %d, %v", len(ms), err)
	}
}
