package broker

import (
	"errors"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestPrepare_DeletedBetweenDryRunAndWrite: Prepare checks its acks in a
// dry run, then stores the transaction in a second Update. A queue deleted
// and made again in between (numbering from 1 again) left the prepared
// ack naming the new queue's message of that number, and CommitPrepared
// removed it. Prepare now checks that each destination it acks in is the
// one its dry run saw, and fails (kdb.ErrNotFound) if not.
func TestPrepare_DeletedBetweenDryRunAndWrite(t *testing.T) {
	for _, kind := range []DestKind{Queue, Topic} {
		t.Run(kind.String(), func(t *testing.T) {
			b := openTestBroker(t, nil)
			if kind == Topic {
				if err := b.Subscribe("d", "s"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := b.Send(kind, "d", &Message{ID: "old"}); err != nil {
				t.Fatal(err)
			}
			tx := b.BeginTx()
			if kind == Queue {
				_ = tx.Ack(kind, "d", 1)
			} else {
				_ = tx.AckSub("d", "s", 1)
			}
			ran := false
			testHookPrepareWrite = func() {
				testHookPrepareWrite = nil
				ran = true
				if err := b.DeleteDestination(kind, "d"); err != nil {
					t.Error(err)
				}
				if kind == Topic {
					if err := b.Subscribe("d", "s"); err != nil {
						t.Error(err)
					}
				}
				if _, err := b.Send(kind, "d", &Message{ID: "new"}); err != nil {
					t.Error(err)
				}
			}
			defer func() { testHookPrepareWrite = nil }()
			err := tx.Prepare("x")
			if !ran {
				t.Fatal("the hook between the dry run and the write did not run")
			}
			if err == nil {
				cerr := b.CommitPrepared("x")
				_, gerr := b.GetMessage(kind, "d", "new")
				t.Fatalf("Prepare of an ack of %s d seq 1, deleted and made again after its dry run: nil; CommitPrepared: %v; the new %s's message \"new\" (seq 1): %v",
					kind, cerr, kind, gerr)
			}
			if !errors.Is(err, kdb.ErrNotFound) {
				t.Fatalf("Prepare of an ack in a %s deleted since its dry run: %v, want kdb.ErrNotFound", kind, err)
			}
			if xs, err := b.Prepared(); err != nil || len(xs) != 0 {
				t.Fatalf("prepared after the refusal: %v, %v", xs, err)
			}
			if _, err := b.GetMessage(kind, "d", "new"); err != nil {
				t.Fatalf("the new %s's message: %v", kind, err)
			}
			if err := b.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
