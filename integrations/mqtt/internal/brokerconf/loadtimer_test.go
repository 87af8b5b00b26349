package brokerconf

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
)

// slowHook reads its stored inflight messages in Init, as kdb's hook does,
// and hands them out in StoredInflightMessages; both take a known time.
type slowHook struct {
	mqtt.HookBase
	init, stored time.Duration
	loaded       []storage.Message
}

func (h *slowHook) ID() string { return "slow" }

func (h *slowHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.StoredClients, mqtt.StoredInflightMessages}, []byte{b})
}

func (h *slowHook) Init(any) error {
	time.Sleep(h.init)
	h.loaded = []storage.Message{{ID: "in_c_1"}}
	return nil
}

func (h *slowHook) StoredClients() ([]storage.Client, error) { return nil, nil }

func (h *slowHook) StoredInflightMessages() ([]storage.Message, error) {
	time.Sleep(h.stored)
	return h.loaded, nil
}

// TestLoadTimer_CountsInit: the logged store_read_time is the hook's
// whole reading of the store, its Init (AddHook) as well as the Stored*
// calls in Serve. It used to time the Stored* calls only, and reported
// 126 ms for a 10 s start whose time was in the kdb hook's Init.
func TestLoadTimer_CountsInit(t *testing.T) {
	const initTime, storedTime = 150 * time.Millisecond, 20 * time.Millisecond
	srv, err := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	timed := &LoadTimer{Hook: &slowHook{init: initTime, stored: storedTime}}
	if err := srv.AddHook(timed, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got := timed.Took(); got < initTime+storedTime {
		t.Fatalf("Took() = %v, want at least the hook's Init (%v) and Stored* calls (%v)", got, initTime, storedTime)
	}
}
