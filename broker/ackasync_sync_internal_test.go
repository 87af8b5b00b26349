package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// A Sync that begins while an AckAsync is between numbering its ack and
// handing it to the engine does not wait for it: that AckAsync has not
// returned, and its deferred ack, queued after the engine's Sync ran the
// queue, would wait for the SyncInterval timer (an outside tester saw
// 2 s stalls of Sync with a 2 s SyncInterval). TestSync_NotHeldByAnAckAsyncStillRunning
// races them without the hook.
func TestSync_SkipsTheAckAsyncBeingHanded(t *testing.T) {
	const interval = 5 * time.Second
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SyncInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	m := &Message{ID: fmt.Sprint("m-1")}
	if _, err := b.Send(Queue, "q", m); err != nil {
		t.Fatal(err)
	}
	inGap, release := make(chan struct{}), make(chan struct{})
	testHookHanding = func() {
		close(inGap)
		<-release
	}
	defer func() { testHookHanding = nil }()
	acked := make(chan error, 1)
	go func() { acked <- b.AckAsync(Queue, "q", m.Seq) }()
	<-inGap
	synced := make(chan time.Duration, 1)
	go func() {
		t0 := time.Now()
		if err := b.Sync(); err != nil {
			t.Error(err)
		}
		synced <- time.Since(t0)
	}()
	time.Sleep(100 * time.Millisecond) // the Sync reads what is out, and runs the engine's
	close(release)
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
	select {
	case took := <-synced:
		t.Logf("Sync took %v", took)
	case <-time.After(interval / 2):
		t.Fatalf("Sync still waiting after %v for an AckAsync that had not returned when it began (SyncInterval %v)", interval/2, interval)
	}
	// Once AckAsync returned, Sync waits for it.
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(Queue, "q"); err != nil || d.Count != 0 {
		t.Fatalf("after the AckAsync and a Sync: %+v, %v; want an empty queue", d, err)
	}
}
