"""The only modules that touch boto3: DynamoDB and SQS behind the engine's ports."""
