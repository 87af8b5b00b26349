package kdb

import (
	"fmt"
	"testing"
	"time"
)

// TestCheckpointer_NoSecondCheckpointForOneThatRan: the background
// checkpointer decided a checkpoint was due, then waited for ckMu while
// another checkpoint (an explicit Checkpoint, say) took it, and then ran
// its own anyway, with nothing new to write: a redundant checkpoint, with
// its fsyncs (seen in a kdbtool test whose hook raced with it). It decides
// again once it holds ckMu.
func TestCheckpointer_NoSecondCheckpointForOneThatRan(t *testing.T) {
	db, err := Open(t.TempDir(), &Options{CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	due := make(chan struct{}, 1)
	testHookCheckpointerDue = func() {
		select {
		case due <- struct{}{}:
		default:
		}
	}
	defer func() { testHookCheckpointerDue = nil }()
	for round := 0; round < 3; round++ {
		for i := 0; i < 50; i++ {
			if err := db.Put("t", []byte(fmt.Sprint(round, i)), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		before := db.Stats().Checkpoints
		db.ckMu.Lock()
		db.mu.Lock()
		db.mu.recoveryCk = true // due, as after a recovery that replayed records
		db.mu.Unlock()
		db.kickCheckpoint()
		<-due // the checkpointer saw it due; it waits for ckMu
		time.Sleep(20 * time.Millisecond)
		// Another checkpoint takes the one it saw due.
		if err := db.checkpointLocked(); err != nil {
			db.ckMu.Unlock()
			t.Fatal(err)
		}
		db.ckMu.Unlock()
		time.Sleep(100 * time.Millisecond)
		if n := db.Stats().Checkpoints - before; n != 1 {
			t.Fatalf("round %d: %d checkpoints for one that was due, want 1", round, n)
		}
	}
}
