package v1alpha1

// Condition reasons of a Job (stable, PascalCase; messages are for humans).
const (
	// Accepted reasons.

	// ReasonValid: Accepted=True, everything resolved.
	ReasonValid = "Valid"
	// ReasonNoDefaultJobClass: the Job names no class and there is no default.
	ReasonNoDefaultJobClass = "NoDefaultJobClass"
	// ReasonAmbiguousDefaultJobClass: two or more JobClasses claim to be the
	// cluster default.
	ReasonAmbiguousDefaultJobClass = "AmbiguousDefaultJobClass"
	// ReasonJobClassNotFound: the named (or namespace default) class does
	// not exist, or no longer has the UID the Job was accepted with.
	ReasonJobClassNotFound = "JobClassNotFound"
	// ReasonJobClassNotAccepted: the class exists but is not Accepted.
	ReasonJobClassNotAccepted = "JobClassNotAccepted"
	// ReasonNamespaceNotAllowed: the class's allowedNamespaces excludes the
	// Job's namespace.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonInvalidResources: the effective resources break the class's
	// minimum or maximum, or a request exceeds its limit.
	ReasonInvalidResources = "InvalidResources"
	// ReasonEnvReferenceNotFound: a Secret or ConfigMap (or its key) an env
	// variable references is missing; the Job waits for it.
	ReasonEnvReferenceNotFound = "EnvReferenceNotFound"
	// ReasonInvalidEnvReference: an env variable's Secret or ConfigMap
	// reference, or an image pull Secret, has a name or key no object can
	// have (the schema accepts, for example, an empty name); it never
	// resolves, so the Job is refused until it is recreated.
	ReasonInvalidEnvReference = "InvalidEnvReference"
	// ReasonSecretEnvNotAllowed: the class's OpenSandboxExecutionParameters
	// do not set allowSecretEnv and an env variable references a Secret
	// (the adapter would have to send its value to OpenSandbox); the Job
	// waits for the parameters to allow it.
	ReasonSecretEnvNotAllowed = "SecretEnvNotAllowed"
	// ReasonImageAuthNotAllowed: the class's OpenSandboxExecutionParameters
	// do not set allowImageAuth and the task names imagePullSecrets (the
	// adapter would have to send registry credentials to OpenSandbox); the
	// Job waits for the parameters to allow it.
	ReasonImageAuthNotAllowed = "ImageAuthNotAllowed"
	// ReasonCommandRequired: the class is an OpenSandbox class and the task
	// has no command (the adapter runs the task as a command in the sandbox
	// and can not read the image's entrypoint).
	ReasonCommandRequired = "CommandRequired"
	// ReasonRequestMappingUnsupported: the class is an OpenSandbox class
	// with requestMapping Native and a request differs from its limit (or
	// has none): OpenSandbox has only resourceLimits, so the request can
	// not be honoured and is never silently dropped.
	ReasonRequestMappingUnsupported = "RequestMappingUnsupported"

	// Scheduled reasons.

	// ReasonBackendCreated: Scheduled=True, the backend execution exists.
	ReasonBackendCreated = "BackendCreated"
	// ReasonNotScheduled: Scheduled=False before the first Ensure outcome.
	ReasonNotScheduled = "Pending"
	// ReasonClassNotReady: the class is Accepted but not Ready; no new
	// execution starts until it is.
	ReasonClassNotReady = "ClassNotReady"
	// ReasonServiceAccountNotFound: the parameters' ServiceAccount is
	// missing in the Job's namespace (never the default one instead).
	ReasonServiceAccountNotFound = "ServiceAccountNotFound"
	// ReasonParametersChanged: the class's parameters object is gone or was
	// recreated with another UID before the execution was created.
	ReasonParametersChanged = "ParametersChanged"
	// ReasonBackendUnavailable: the backend could not be reached (or
	// answered with a server error); retried. Also JobClass Ready=False
	// when the class's backend probe can not reach its backend.
	ReasonBackendUnavailable = "BackendUnavailable"

	// Succeeded reasons.

	// ReasonPending: not accepted yet.
	ReasonPending = "Pending"
	// ReasonScheduling: accepted, the backend execution is being created.
	ReasonScheduling = "Scheduling"
	// ReasonStarting: the execution exists, its main process has not started.
	ReasonStarting = "Starting"
	// ReasonRunning: the main process runs.
	ReasonRunning = "Running"
	// ReasonCancelling: a stop was requested and is not confirmed yet.
	ReasonCancelling = "Cancelling"
	// ReasonResultUnknown: Ayatori can not prove the execution runs or
	// stopped (non-terminal; no completionTime).
	ReasonResultUnknown = "ResultUnknown"
	// ReasonCompleted: Succeeded=True, the main process exited 0.
	ReasonCompleted = "Completed"
	// ReasonProcessFailed: the main process exited non-zero (exit code in
	// status.result).
	ReasonProcessFailed = "ProcessFailed"
	// ReasonDeadlineExceeded: activeDeadlineSeconds passed; the execution
	// was stopped.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonCancelled: stopped on desiredState Cancelled.
	ReasonCancelled = "Cancelled"
	// ReasonBackendLost: an administrator confirmed the execution is lost.
	ReasonBackendLost = "BackendLost"
	// ReasonImagePullFailed: the image could not be pulled; the execution
	// was stopped before it started.
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonOOMKilled: the main process was killed at its memory limit
	// (the kernel's out-of-memory kill); never reported as success; the
	// exit code (137 on Linux) is in status.result when known.
	ReasonOOMKilled = "OOMKilled"
	// ReasonEvicted: the backend evicted the execution (node pressure, node
	// lost); never reported as success.
	ReasonEvicted = "Evicted"
	// ReasonBackendFailed: the backend ended the execution for another
	// reason (message says which).
	ReasonBackendFailed = "BackendFailed"

	// JobClass reasons.

	// ReasonAccepted: JobClass Accepted=True.
	ReasonAccepted = "Accepted"
	// ReasonUnsupportedController: no controller of this manager owns the
	// class's controllerName.
	ReasonUnsupportedController = "UnsupportedController"
	// ReasonInvalidParametersReference: the parameters kind is not one the
	// controller supports.
	ReasonInvalidParametersReference = "InvalidParametersReference"
	// ReasonParametersNotFound: the parameters object does not exist.
	ReasonParametersNotFound = "ParametersNotFound"
	// ReasonInvalidResourcePolicy: defaults, minimum and maximum contradict.
	ReasonInvalidResourcePolicy = "InvalidResourcePolicy"
	// ReasonBackendReachable: JobClass Ready=True.
	ReasonBackendReachable = "BackendReachable"
	// ReasonRuntimeClassNotFound: the parameters' RuntimeClass is missing.
	ReasonRuntimeClassNotFound = "RuntimeClassNotFound"
	// ReasonAPIKeySecretNotFound: JobClass Ready=False, the Secret the
	// parameters' apiKeySecretRef names, or its key, is missing.
	ReasonAPIKeySecretNotFound = "APIKeySecretNotFound"
	// ReasonAPIKeyRejected: JobClass Ready=False, the backend refused the
	// API key (HTTP 401 or 403).
	ReasonAPIKeyRejected = "APIKeyRejected"
	// (A backend probe that can not reach its backend, or gets a server
	// error, reports ReasonBackendUnavailable.)
	// ReasonJobClassDeleting: JobClass Ready=False, the class is being
	// deleted; the message names the non-terminal Jobs that still keep its
	// protection finalizer.
	ReasonJobClassDeleting = "Deleting"
)
