package alarm

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SilenceChoices are the durations the console offers to silence an alarm
// for: long enough to work on a known condition, short enough that a
// forgotten silence ends on its own.
var SilenceChoices = []time.Duration{15 * time.Minute, time.Hour, 4 * time.Hour, 24 * time.Hour}

// Hand is what a person did to an open alarm, as stored: its kind and key
// (for the audit entry) and, for a silence, when it ends.
type Hand struct {
	Kind, Key string
	Until     time.Time
}

// Acknowledge records that by took the open alarm id on, at the given
// time. tx must be scoped to the alarm's tenant; an alarm that is not open
// (or not the tenant's) answers pgx.ErrNoRows. Acknowledging again keeps
// the first person and time.
func Acknowledge(ctx context.Context, tx pgx.Tx, id int64, by string, at time.Time) (Hand, error) {
	var h Hand
	err := tx.QueryRow(ctx, `UPDATE alarms SET acknowledged_at = COALESCE(acknowledged_at, $2), acknowledged_by = COALESCE(acknowledged_by, $3)
		WHERE id = $1 AND tenant_id = app_tenant() AND resolved_at IS NULL RETURNING kind, key`, id, at, by).Scan(&h.Kind, &h.Key)
	if err != nil {
		return h, fmt.Errorf("alarm: acknowledge %d: %w", id, err)
	}
	return h, nil
}

// Silence silences the open alarm id from at for d, recorded as by's: it
// stays listed, but the attention strip does not count it and the channels
// are not told of it again until the silence ends (a later silence
// replaces an earlier one). tx must be scoped to the alarm's tenant.
func Silence(ctx context.Context, tx pgx.Tx, id int64, d time.Duration, by string, at time.Time) (Hand, error) {
	if d <= 0 || d > 7*24*time.Hour {
		return Hand{}, fmt.Errorf("alarm: silence %d: %s is not between a minute and a week", id, d)
	}
	h := Hand{Until: at.Add(d)}
	err := tx.QueryRow(ctx, `UPDATE alarms SET silenced_at = $2, silenced_until = $3, silenced_by = $4
		WHERE id = $1 AND tenant_id = app_tenant() AND resolved_at IS NULL RETURNING kind, key`, id, at, h.Until, by).Scan(&h.Kind, &h.Key)
	if err == nil {
		err = endOtherSilences(ctx, tx, id, h, at)
	}
	if err != nil {
		return h, fmt.Errorf("alarm: silence %d: %w", id, err)
	}
	return h, nil
}

// Unsilence ends the silence of the open alarm id at the given time (and
// of the condition: a re-raised alarm inherits nothing from it).
func Unsilence(ctx context.Context, tx pgx.Tx, id int64, at time.Time) (Hand, error) {
	var h Hand
	err := tx.QueryRow(ctx, `UPDATE alarms SET silenced_until = $2
		WHERE id = $1 AND tenant_id = app_tenant() AND resolved_at IS NULL AND silenced_until > $2 RETURNING kind, key`, id, at).Scan(&h.Kind, &h.Key)
	if err == nil {
		err = endOtherSilences(ctx, tx, id, h, at)
	}
	if err != nil {
		return h, fmt.Errorf("alarm: end silence %d: %w", id, err)
	}
	return h, nil
}

// endOtherSilences ends the silences of the condition's earlier (resolved)
// rows, which a re-raised alarm would otherwise inherit: the person's
// latest word on the condition is the one that holds.
func endOtherSilences(ctx context.Context, tx pgx.Tx, id int64, h Hand, at time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE alarms SET silenced_until = $4
		WHERE tenant_id = app_tenant() AND kind = $1 AND key = $2 AND id <> $3 AND silenced_until > $4`, h.Kind, h.Key, id, at)
	return err
}
