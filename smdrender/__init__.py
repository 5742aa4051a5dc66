"""smdrender — results drawn and tabulated: the plots of an experiment (`plots`), a study's overlay,
heatmap and scatter (`study_plots`), a preset's catalog entry and figure (`presets`), the tables
(`tables`: CSV and Parquet) and the point thinning they share (`downsample`).

Pure functions of documents the caller gathered: no database, no HTTP. The service (`api/`) and the
CLI (`smdcli/`, `smd study run`, `smd presets run --local`) both use them, so a figure drawn here is the
one the service serves. It never imports `api`.
"""
