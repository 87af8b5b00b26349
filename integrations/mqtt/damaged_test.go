package kdbmqtt_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
	"github.com/kdb-project/kdb/integrations/mqtt/internal/brokerconf"
)

// A client record and a fan-out record damaged on disk (a byte of each
// flipped in the journal, where kdb keeps values over its threshold: kdb
// reports kdb.ErrCorrupt for them) are removed at the start with what
// only they named: the client's subscription and inflight message. A good
// session is kept. Before, all of it stayed stored for good.
func TestRestart_DamagedRecordsOnDiskRemoved(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := db.Namespace(kdbmqtt.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	userMark := bytes.Repeat([]byte("U"), 100)
	fanMark := bytes.Repeat([]byte("F"), 100)
	// A fan-out record of a publish no longer stored: 30 keys of 100 bytes.
	fan := binary.AppendUvarint(nil, 30)
	for range 30 {
		fan = binary.AppendUvarint(fan, uint64(len(fanMark)))
		fan = append(fan, fanMark...)
	}
	fanKey := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, 42), 0)
	b := ns.NewBatch()
	b.Put("cl", []byte("hurt"), []byte(`{"id":"hurt","t":"CL","username":"`+string(bytes.Repeat(userMark, 30))+`"}`))
	b.Put("sub", []byte("hurt\x00a/#"), []byte(`{"id":"hurt:a/#","t":"SUB","client":"hurt","filter":"a/#","qos":1}`))
	b.Put("if", []byte("hurt\x00\x00\x01"), []byte(`{"t":"IFM","client":"hurt","topic_name":"a/1","packet_id":1,"fixedheader":{"type":3,"qos":1}}`))
	b.Put("cl", []byte("fine"), []byte(`{"id":"fine","t":"CL"}`))
	b.Put("sub", []byte("fine\x00a/#"), []byte(`{"id":"fine:a/#","t":"SUB","client":"fine","filter":"a/#","qos":1}`))
	b.Put("fan", fanKey, fan)
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if damage(t, dir, bytes.Repeat(userMark, 2)) == 0 || damage(t, dir, fanMark) == 0 {
		t.Fatal("the records kept in the journal were not found on disk")
	}

	db, err = kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := brokerconf.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	br := serveInProc(t, db, srv)
	if n := br.hook.Skipped(); n != 2 {
		t.Errorf("skipped %d records, want 2 (the damaged client and fan-out records)", n)
	}
	if _, ok := srv.Clients.Get("fine"); !ok {
		t.Error("the good session was not restored")
	}
	br.close(t) // stops the hook: its removals are written

	db, err = kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	ns, err = db.Namespace(kdbmqtt.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		index, key string
		kept       bool
	}{
		{"cl", "hurt", false}, {"sub", "hurt\x00a/#", false}, {"if", "hurt\x00\x00\x01", false}, {"fan", string(fanKey), false},
		{"cl", "fine", true}, {"sub", "fine\x00a/#", true},
	} {
		_, err := ns.Get(r.index, []byte(r.key))
		switch gone := errors.Is(err, kdb.ErrNotFound); {
		case r.kept && err != nil:
			t.Errorf("%s %q: %v, want it kept", r.index, r.key, err)
		case !r.kept && !gone:
			t.Errorf("%s %q still stored (%v): only a damaged record named it", r.index, r.key, err)
		}
	}
}
