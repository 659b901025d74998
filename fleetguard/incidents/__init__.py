"""The shell around diagnosis/: policy files, the incident store, the service loop, scan, replay."""
