#pragma once
/// Datasets, batches and the data loader: the data/ headers in one include (kept so that existing
/// `#include "volt/module/data.h"` lines go on working).
#include "volt/data/batch.h"
#include "volt/data/batch_stream.h"
#include "volt/data/data_loader.h"
#include "volt/data/dataset.h"
