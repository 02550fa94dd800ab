package wire

import "time"

// TypeAssistantTask asks an enrolled assistant to start a task (v4):
// panel → assistant, a command answered with CommandResult.
const TypeAssistantTask Type = "assistant_task"

// TypeAssistantReport is the enrolled assistant's progress report (v4):
// assistant → panel, every few seconds and on change.
const TypeAssistantReport Type = "assistant_report"

// AssistantReport is what an enrolled assistant (a worker kind that runs on
// a person's own machine) tells the panel: its recent tasks, their
// progress, spend and pending approvals. No page text, draft or secret.
type AssistantReport struct {
	// Paused is the assistant's pause switch (its own or the panel's).
	Paused bool `json:"paused"`
	// Model names the model and endpoint kind ("ollama qwen2.5:7b").
	Model string `json:"model"`
	// TokensToday and CostTodayUSD are the day's model use so far.
	TokensToday  int     `json:"tokens_today"`
	CostTodayUSD float64 `json:"cost_today_usd"`
	// Tasks are the most recent tasks, newest first (at most 20).
	Tasks []AssistantTask `json:"tasks"`
}

// AssistantTask is one task in an AssistantReport.
type AssistantTask struct {
	ID         int64   `json:"id"`
	Goal       string  `json:"goal"`
	Status     string  `json:"status"`
	StopReason string  `json:"stop_reason,omitempty"`
	Steps      int     `json:"steps"`
	Tokens     int     `json:"tokens"`
	CostUSD    float64 `json:"cost_usd"`
	// Tabs are the names of the task's tabs ("brief", "drafts").
	Tabs []string `json:"tabs,omitempty"`
	// Progress is the task's recent steps in a few words.
	Progress string `json:"progress,omitempty"`
	// PendingApproval describes the held action waiting for the person.
	PendingApproval string    `json:"pending_approval,omitempty"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// MessageType implements Message.
func (AssistantReport) MessageType() Type { return TypeAssistantReport }

// AssistantTaskStart is a task an operator started from the console. The
// assistant takes it only if its person allowed tasks from the panel
// (--accept-panel-tasks); it then runs like any task, behind the same
// approval gate on the person's machine.
type AssistantTaskStart struct {
	CommandID string `json:"command_id"`
	// Goal is the task in words; StartURLs are its plan (at least one).
	Goal      string   `json:"goal"`
	StartURLs []string `json:"start_urls"`
	// By names the operator who started it (shown with the task).
	By string `json:"by"`
}

// MessageType implements Message.
func (AssistantTaskStart) MessageType() Type { return TypeAssistantTask }

// AssistantLimits are the panel's limits for an enrolled assistant (v4, in
// Welcome and Configure): the tenant's and the installation's. The
// assistant applies, per limit, the lowest of its task's, its person's, the
// tenant's and the global one; a zero value is no limit from that source.
type AssistantLimits struct {
	Tenant AssistantLimitSet `json:"tenant"`
	Global AssistantLimitSet `json:"global"`
}

// AssistantLimitSet is one source's limits: per task and per day.
type AssistantLimitSet struct {
	TaskSteps       int     `json:"task_steps,omitempty"`
	TaskTokens      int     `json:"task_tokens,omitempty"`
	TaskCostUSD     float64 `json:"task_cost_usd,omitempty"`
	TaskWallSeconds int     `json:"task_wall_seconds,omitempty"`
	TaskTabs        int     `json:"task_tabs,omitempty"`
	DaySteps        int     `json:"day_steps,omitempty"`
	DayTokens       int     `json:"day_tokens,omitempty"`
	DayCostUSD      float64 `json:"day_cost_usd,omitempty"`
}

// IsZero reports whether the set limits nothing.
func (s AssistantLimitSet) IsZero() bool { return s == AssistantLimitSet{} }
