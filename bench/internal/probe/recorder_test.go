package probe

import (
	"strconv"
	"testing"
	"time"
)

func TestRecorderReportsEachGenerationOnceWhenEveryObjectReachedIt(t *testing.T) {
	var reached []int64
	r := NewRecorder(3, nil, func(gen int64, _ time.Time) { reached = append(reached, gen) })
	r.Handled("pje-00000", 1)
	r.Handled("pje-00001", 1)
	r.Handled("pje-00001", 1)  // a second handling of the same state
	r.Handled("pje-warmup", 1) // not one of the numbered objects
	if len(reached) != 0 {
		t.Fatalf("reached %v with one object unhandled", reached)
	}
	r.Handled("pje-00002", 2) // counts for generations 1 and 2
	r.Handled("pje-00000", 2)
	r.Handled("pje-00001", 0) // no generation counts as 1, never lowers
	if want := []int64{1}; len(reached) != 1 || reached[0] != 1 {
		t.Fatalf("reached %v, want %v", reached, want)
	}
	r.Handled("pje-00001", 3)
	if len(reached) != 2 || reached[1] != 2 {
		t.Fatalf("reached %v, want [1 2]", reached)
	}
}

func TestRecorderSamplesEachNewStampOnce(t *testing.T) {
	var first int
	r := NewRecorder(2, func(time.Time) { first++ }, nil)
	old := time.Now().Add(-time.Hour).UnixNano()
	r.Called("pje-00000", old) // left by an earlier process: no sample
	stamp := time.Now().UnixNano()
	r.Called("pje-00000", stamp)
	r.Called("pje-00000", stamp) // the same update handled again
	r.Called("pje-00001", 0)
	if got := len(r.Samples()); got != 1 {
		t.Errorf("%d samples, want 1", got)
	}
	if first != 1 || r.Calls() != 4 {
		t.Errorf("first called %d times, %d calls; want 1 and 4", first, r.Calls())
	}
	if got := Stamp(map[string]string{StampAnnotation: strconv.FormatInt(stamp, 10)}); got != stamp {
		t.Errorf("Stamp = %d, want %d", got, stamp)
	}
}
