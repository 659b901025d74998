"""Per-section settings that fleetguard.config assembles, each with its own parsing and validation: the alert
webhooks, the diagnosis and policy sections, and the policy files they name. Ground level: these import only
the core packages, so the configuration never imports the services it configures."""
